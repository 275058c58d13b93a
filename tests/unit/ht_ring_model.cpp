// SPDX-License-Identifier: Apache-2.0
#include "tests/unit/ht_ring_model.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <tuple>

#include "kernels/wire/ht_ring.hpp"
#include "tests/reference/numeric.hpp"

namespace epc::test {

namespace {

using kernels::HtRingHeader;

struct Slot {
  HtRingHeader header{};
  std::vector<int32_t> rows;   // dispatch rail slots: the token's row on each rank of the reader's node, or -1
  std::vector<uint16_t> data;  // the row, or combine's partial
  bool full = false;
};

// Slots at the reader; each side sees the other's counter only as the network delivers it.
class Ring {
 public:
  Ring(uint32_t capacity, RingModelRun* run) : capacity_(capacity), slots_(capacity), run_(run) {}

  bool can_push() const { return kernels::ht_ring_has_space(tail_, head_seen_, capacity_); }
  void push(Slot slot) {
    Slot& s = slots_[kernels::ht_ring_index(tail_, capacity_)];
    if (s.full) throw std::logic_error("a ring slot was rewritten before its reader took it");
    s = std::move(slot);
    s.full = true;
    ++tail_;
    if (tail_ - head_ > capacity_) throw std::logic_error("a ring holds more slots than it has");
    run_->max_occupancy = std::max<uint32_t>(run_->max_occupancy, static_cast<uint32_t>(tail_ - head_));
    ++run_->slots_through_all;
  }
  const Slot* front() const {
    return kernels::ht_ring_has_data(tail_seen_, head_) ? &slots_[kernels::ht_ring_index(head_, capacity_)] : nullptr;
  }
  void pop() {
    Slot& s = slots_[kernels::ht_ring_index(head_, capacity_)];
    if (!s.full) throw std::logic_error("a ring slot was read before its writer filled it");
    s.full = false;
    ++head_;
  }
  // One signal arrives: a slot's tail increment at the reader, or a credit at the writer.
  bool deliver(std::mt19937_64& rng) {
    const bool tail = tail_seen_ < tail_, head = head_seen_ < head_;
    if (!tail && !head) return false;
    if (tail && (!head || (rng() & 1) != 0)) {
      ++tail_seen_;
    } else {
      ++head_seen_;
    }
    return true;
  }
  bool drained() const { return head_ == tail_ && tail_seen_ == tail_ && head_seen_ == head_; }

 private:
  uint32_t capacity_;
  std::vector<Slot> slots_;
  RingModelRun* run_;
  uint64_t tail_ = 0, tail_seen_ = 0;  // the writer's count, the reader's view of it
  uint64_t head_ = 0, head_seen_ = 0;  // the reader's count, the writer's view of it
};

using RingKey = std::tuple<int, int, int>;  // (writer, reader, channel)
using Actor = std::function<bool()>;        // one move if it can make one; true if it did

// Which ranks receive token t of source s (an unmasked entry's expert there), and the row
// of it there: the source's own count, as its layout scan computes it.
struct SourceView {
  std::vector<std::vector<int32_t>> row;        // [s][t * R + y]: row among s's rows for y, or -1
  std::vector<std::vector<int32_t>> recv_base;  // [y][s]: rows on y before s's
  std::vector<int32_t> rows;                    // [y]
};

SourceView source_view(const ref::Problem& p) {
  const int R = p.nranks;
  SourceView v;
  v.row.resize(R);
  v.recv_base.assign(R, std::vector<int32_t>(R, 0));
  v.rows.assign(R, 0);
  std::vector<std::vector<int32_t>> sent(R, std::vector<int32_t>(R, 0));
  for (int s = 0; s < R; ++s) {
    const ref::RankTokens& rt = p.ranks[s];
    v.row[s].assign(static_cast<size_t>(rt.num_tokens) * R, -1);
    for (int t = 0; t < rt.num_tokens; ++t) {
      for (int k = 0; k < p.topk; ++k) {
        const int64_t e = rt.topk_idx[static_cast<size_t>(t) * p.topk + k];
        if (e < 0) continue;
        int32_t& r = v.row[s][static_cast<size_t>(t) * R + p.rank_of_expert(e)];
        if (r < 0) r = sent[s][p.rank_of_expert(e)]++;
      }
    }
  }
  for (int y = 0; y < R; ++y) {
    for (int s = 0; s < R; ++s) {
      v.recv_base[y][s] = v.rows[y];
      v.rows[y] += sent[s][y];
    }
  }
  return v;
}

class Model {
 public:
  Model(const RingModelShape& shape, const RingModelOptions& options, RingModelRun* run)
      : S_(shape.node_size),
        M_(shape.nodes),
        R_(shape.nodes * shape.node_size),
        G_(shape.channels),
        rng_(options.seed),
        blocking_forwarder_(options.blocking_forwarder),
        run_(run) {
    for (int w = 0; w < R_; ++w) {
      for (int g = 0; g < G_; ++g) {
        for (int m = 0; m < M_; ++m) {
          if (m == node(w)) continue;
          add(rail_, {w, rail_peer(w, m), g}, shape.capacity);
          add(partial_, {w, rail_peer(w, m), g}, shape.capacity);
        }
        for (int y = node(w) * S_; y < (node(w) + 1) * S_; ++y) {
          if (y == w) continue;
          add(nvl_, {w, y, g}, shape.capacity);
          add(combine_, {w, y, g}, shape.capacity);
        }
      }
    }
  }

  // One dispatch and one combine of `p`.
  bool step(const ref::Problem& p, const std::vector<std::vector<uint16_t>>& combine_in, RingModelStep* out) {
    const SourceView v = source_view(p);
    return dispatch(p, v, out) && combine(p, v, combine_in, out);
  }

 private:
  int node(int r) const { return r / S_; }
  int rail_peer(int r, int m) const { return m * S_ + r % S_; }
  void add(std::map<RingKey, Ring>& rings, RingKey key, uint32_t capacity) { rings.emplace(key, Ring(capacity, run_)); }
  std::vector<uint16_t> row_of(const std::vector<uint16_t>& rows, int64_t i, int H) const {
    return std::vector<uint16_t>(rows.begin() + i * H, rows.begin() + (i + 1) * H);
  }

  // Moves until nothing can move; false (and `stuck`) unless every ring drained and `done`.
  bool schedule(std::vector<Actor>& actors, const std::function<std::string()>& pending) {
    for (auto* rings : {&rail_, &nvl_, &combine_, &partial_}) {
      for (auto& [key, ring] : *rings) actors.push_back([this, r = &ring] { return r->deliver(rng_); });
    }
    std::vector<size_t> order(actors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    for (;;) {
      std::shuffle(order.begin(), order.end(), rng_);
      bool moved = false;
      for (size_t i : order) {
        if (actors[i]()) {
          moved = true;
          ++run_->moves;
          break;
        }
      }
      if (!moved) break;
    }
    std::string stuck = pending();
    for (auto* rings : {&rail_, &nvl_, &combine_, &partial_}) {
      for (auto& [key, ring] : *rings) {
        if (!ring.drained())
          stuck += " ring (" + std::to_string(std::get<0>(key)) + " -> " + std::to_string(std::get<1>(key)) +
                   ", channel " + std::to_string(std::get<2>(key)) + ") not drained;";
      }
    }
    run_->stuck = stuck;
    return stuck.empty();
  }

  template <typename T>
  void shuffled(std::vector<T>& items) {
    std::shuffle(items.begin(), items.end(), rng_);
  }

  bool dispatch(const ref::Problem& p, const SourceView& v, RingModelStep* out) {
    const int H = p.hidden;
    out->dispatched.assign(R_, {});
    out->src.assign(R_, {});
    std::vector<std::vector<bool>> placed(R_);
    for (int y = 0; y < R_; ++y) {
      out->dispatched[y].assign(static_cast<size_t>(v.rows[y]) * H, 0);
      out->src[y].assign(v.rows[y], {});
      placed[y].assign(v.rows[y], false);
    }
    auto place = [&](int y, const HtRingHeader& h, const std::vector<uint16_t>& data) {
      const int32_t i = v.recv_base[y][h.source] + h.row;
      if (placed[y][i]) throw std::logic_error("a dispatched row landed twice");
      placed[y][i] = true;
      std::copy(data.begin(), data.end(), out->dispatched[y].begin() + static_cast<int64_t>(i) * H);
      out->src[y][i] = {h.source, h.token};
    };

    struct Sender {
      std::vector<int> tokens;
      size_t cursor = 0;
      std::vector<int> pending;  // destinations of the current token: rank y, or -1 - node
      bool started = false;
      std::vector<Ring*> inputs;           // rail rings into this rank
      std::vector<std::vector<int>> left;  // per input: destinations its front slot still needs
      std::vector<bool> begun;
      std::vector<int> expected, taken;  // per input: slots of this step, slots forwarded
      size_t first_after_own = 0;        // inputs come in node order; this one is the next node's
    };
    std::vector<Sender> senders(static_cast<size_t>(R_) * G_);
    std::vector<Actor> actors;
    for (int i = 0; i < R_; ++i) {
      for (int g = 0; g < G_; ++g) {
        Sender& snd = senders[static_cast<size_t>(i) * G_ + g];
        for (int t = g; t < p.ranks[i].num_tokens; t += G_) snd.tokens.push_back(t);
        for (auto& [key, ring] : rail_) {
          if (std::get<1>(key) == i && std::get<2>(key) == g) snd.inputs.push_back(&ring);
        }
        snd.left.resize(snd.inputs.size());
        snd.begun.assign(snd.inputs.size(), false);
        snd.taken.assign(snd.inputs.size(), 0);
        for (auto& [key, ring] : rail_) {
          if (std::get<1>(key) != i || std::get<2>(key) != g) continue;
          const int source = std::get<0>(key);
          int n = 0;
          for (int t = g; t < p.ranks[source].num_tokens; t += G_) {
            bool here = false;
            for (int y = node(i) * S_; y < (node(i) + 1) * S_; ++y)
              here = here || v.row[source][static_cast<size_t>(t) * R_ + y] >= 0;
            n += here ? 1 : 0;
          }
          snd.expected.push_back(n);
          if (node(source) < node(i)) ++snd.first_after_own;
        }
        // Its own token at the cursor: to itself directly, to node-mates through NVLink
        // rings, to every other node hosting it through the rail ring.
        auto own = [&, i, g, s = &snd]() {
          if (s->cursor == s->tokens.size()) return false;
          const int t = s->tokens[s->cursor];
          const std::vector<uint16_t> data = row_of(p.ranks[i].x, t, H);
          if (!s->started) {
            s->started = true;
            for (int y = 0; y < R_; ++y) {
              if (v.row[i][static_cast<size_t>(t) * R_ + y] < 0) continue;
              if (node(y) == node(i)) {
                s->pending.push_back(y);
              } else if (std::find(s->pending.begin(), s->pending.end(), -1 - node(y)) == s->pending.end()) {
                s->pending.push_back(-1 - node(y));
              }
            }
          }
          shuffled(s->pending);
          bool moved = false;
          for (auto it = s->pending.begin(); it != s->pending.end();) {
            const int d = *it;
            bool sent = false;
            if (d == i) {
              place(i, {i, v.row[i][static_cast<size_t>(t) * R_ + i], t, node(i)}, data);
              sent = true;
            } else if (d >= 0) {
              Ring& r = nvl_.at({i, d, g});
              if ((sent = r.can_push())) {
                r.push({{i, v.row[i][static_cast<size_t>(t) * R_ + d], t, node(i)}, {}, data});
              }
            } else {
              const int m = -1 - d;
              Ring& r = rail_.at({i, rail_peer(i, m), g});
              if ((sent = r.can_push())) {
                std::vector<int32_t> rows(S_);
                for (int y = 0; y < S_; ++y) rows[y] = v.row[i][static_cast<size_t>(t) * R_ + m * S_ + y];
                r.push({{i, -1, t, node(i)}, rows, data});
              }
            }
            if (sent) {
              it = s->pending.erase(it);
              moved = true;
            } else {
              ++it;
            }
          }
          if (s->pending.empty()) {
            ++s->cursor;
            s->started = false;
            moved = true;
          }
          return moved;
        };
        // The front slot of rail input k: forwarded to each rank of this node it names.
        auto forward = [&, i, g, s = &snd](size_t k) {
          const Slot* f = s->inputs[k]->front();
          if (f == nullptr) return false;
          if (!s->begun[k]) {
            s->begun[k] = true;
            for (int y = 0; y < S_; ++y) {
              if (f->rows[y] >= 0) s->left[k].push_back(node(i) * S_ + y);
            }
          }
          bool moved = false;
          for (auto it = s->left[k].begin(); it != s->left[k].end();) {
            const int y = *it;
            const HtRingHeader h{f->header.source, f->rows[y % S_], f->header.token, node(i)};
            bool sent = false;
            if (y == i) {
              place(i, h, f->data);
              sent = true;
            } else {
              Ring& r = nvl_.at({i, y, g});
              if ((sent = r.can_push())) r.push({h, {}, f->data});
            }
            it = sent ? s->left[k].erase(it) : it + 1;
            moved = moved || sent;
          }
          if (s->left[k].empty()) {
            s->inputs[k]->pop();  // the credit: every destination took it
            s->begun[k] = false;
            moved = true;
          }
          return moved;
        };
        actors.push_back(own);
        actors.push_back([this, forward, s = &snd]() {
          auto take = [&](size_t k) {
            const bool moved = forward(k);
            if (moved && !s->begun[k]) ++s->taken[k];  // its front slot was released
            return moved;
          };
          if (blocking_forwarder_) {  // drains its inputs one after the other, the next node's first
            for (size_t n = 0; n < s->inputs.size(); ++n) {
              const size_t k = (n + s->first_after_own) % s->inputs.size();
              if (s->taken[k] < s->expected[k]) return take(k);
            }
            return false;
          }
          std::vector<size_t> order(s->inputs.size());
          std::iota(order.begin(), order.end(), size_t{0});
          shuffled(order);
          for (size_t k : order) {
            if (take(k)) return true;
          }
          return false;
        });
      }
    }
    // Receivers: every NVLink ring into a rank, copied out as it arrives.
    for (auto& [key, ring] : nvl_) {
      actors.push_back([&, y = std::get<1>(key), r = &ring]() {
        const Slot* f = r->front();
        if (f == nullptr) return false;
        place(y, f->header, f->data);
        r->pop();
        return true;
      });
    }
    return schedule(actors, [&] {
      std::string s;
      for (size_t k = 0; k < senders.size(); ++k) {
        if (senders[k].cursor != senders[k].tokens.size()) s += " sender " + std::to_string(k) + " unfinished;";
      }
      return s;
    });
  }

  bool combine(const ref::Problem& p, const SourceView& v, const std::vector<std::vector<uint16_t>>& in,
               RingModelStep* out) {
    const int H = p.hidden;
    out->combined.assign(R_, {});
    for (int s = 0; s < R_; ++s) out->combined[s].assign(static_cast<size_t>(p.ranks[s].num_tokens) * H, 0);
    auto row_on = [&](int s, int t, int d) {
      const int32_t j = v.row[s][static_cast<size_t>(t) * R_ + d];
      return j < 0 ? -1 : v.recv_base[d][s] + j;
    };
    // Producers: rank d's rows, per (target, channel) in key order, each target its own stream.
    struct Stream {
      Ring* ring;
      std::vector<std::pair<uint64_t, Slot>> rows;
      size_t cursor = 0;
    };
    std::vector<Stream> streams;
    for (auto& [key, ring] : combine_) {
      const auto [d, target, g] = key;
      Stream st{&ring, {}, 0};
      for (int s = 0; s < R_; ++s) {
        if (s % S_ != target % S_) continue;  // only sources on the target's rail
        for (int t = g; t < p.ranks[s].num_tokens; t += G_) {
          const int i = row_on(s, t, d);
          if (i >= 0) {
            st.rows.push_back({kernels::ht_ring_key(t, node(s)), {{s, i, t, node(s)}, {}, row_of(in[d], i, H)}});
          }
        }
      }
      std::sort(st.rows.begin(), st.rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      streams.push_back(std::move(st));
    }
    std::vector<Actor> actors;
    for (Stream& st : streams) {
      actors.push_back([s = &st]() {
        if (s->cursor == s->rows.size() || !s->ring->can_push()) return false;
        s->ring->push(s->rows[s->cursor++].second);
        return true;
      });
    }
    // Consumers: rank q takes the keys (t, m) of the sources on its rail in key order.
    std::vector<std::vector<std::pair<int, int>>> keys(static_cast<size_t>(R_) * G_);
    std::vector<size_t> cursor(keys.size(), 0);
    for (int q = 0; q < R_; ++q) {
      for (int g = 0; g < G_; ++g) {
        auto& k = keys[static_cast<size_t>(q) * G_ + g];
        for (int m = 0; m < M_; ++m) {
          for (int t = g; t < p.ranks[rail_peer(q, m)].num_tokens; t += G_) k.push_back({t, m});
        }
        std::sort(k.begin(), k.end(), [](const auto& a, const auto& b) {
          return kernels::ht_ring_key(a.first, a.second) < kernels::ht_ring_key(b.first, b.second);
        });
        actors.push_back([&, q, g, ks = &k, c = &cursor[static_cast<size_t>(q) * G_ + g]]() {
          if (*c == ks->size()) return false;
          const auto [t, m] = (*ks)[*c];
          const int s = rail_peer(q, m);
          // This node's rows for (s, t), in rank order: q's own, or the front of d's ring.
          std::vector<std::vector<uint16_t>> rows;
          std::vector<Ring*> taken;
          for (int d = node(q) * S_; d < (node(q) + 1) * S_; ++d) {
            const int i = row_on(s, t, d);
            if (i < 0) continue;
            if (d == q) {
              rows.push_back(row_of(in[q], i, H));
              continue;
            }
            Ring& r = combine_.at({d, q, g});
            const Slot* f = r.front();
            if (f == nullptr) return false;
            if (f->header.source != s || f->header.token != t) throw std::logic_error("combine rows out of key order");
            rows.push_back(f->data);
            taken.push_back(&r);
          }
          std::vector<uint16_t> result(H);
          if (m != node(q)) {
            if (rows.empty()) {
              ++*c;  // s expects no partial from this node
              return true;
            }
            Ring& to = partial_.at({q, s, g});
            if (!to.can_push()) return false;
            for (int ch = 0; ch < H; ++ch) {
              float partial = 0.0f;
              for (const auto& r : rows) partial = partial + ref::bf16_to_float(r[ch]);
              result[ch] = ref::float_to_bf16(partial);
            }
            to.push({{s, -1, t, m}, {}, result});
          } else {
            // q's own token: its node's rows, then each other node's partial, in node order.
            std::vector<const Slot*> partials(M_, nullptr);
            for (int n = 0; n < M_; ++n) {
              if (n == m) continue;
              bool any = false;
              for (int d = n * S_; d < (n + 1) * S_; ++d) any = any || row_on(s, t, d) >= 0;
              if (!any) continue;
              Ring& r = partial_.at({rail_peer(q, n), q, g});
              if ((partials[n] = r.front()) == nullptr) return false;
              if (partials[n]->header.token != t) throw std::logic_error("partials out of token order");
              taken.push_back(&r);
            }
            for (int ch = 0; ch < H; ++ch) {
              float acc = 0.0f;
              for (int n = 0; n < M_; ++n) {
                if (n == m) {
                  for (const auto& r : rows) acc = acc + ref::bf16_to_float(r[ch]);
                } else if (partials[n] != nullptr) {
                  acc = acc + ref::bf16_to_float(partials[n]->data[ch]);
                }
              }
              result[ch] = ref::float_to_bf16(acc);
            }
            std::copy(result.begin(), result.end(), out->combined[q].begin() + static_cast<int64_t>(t) * H);
          }
          for (Ring* r : taken) r->pop();
          ++*c;
          return true;
        });
      }
    }
    return schedule(actors, [&] {
      std::string s;
      for (size_t k = 0; k < keys.size(); ++k) {
        if (cursor[k] != keys[k].size()) s += " combine consumer " + std::to_string(k) + " unfinished;";
      }
      for (size_t k = 0; k < streams.size(); ++k) {
        if (streams[k].cursor != streams[k].rows.size()) s += " combine stream " + std::to_string(k) + " unfinished;";
      }
      return s;
    });
  }

  int S_, M_, R_, G_;
  std::mt19937_64 rng_;
  bool blocking_forwarder_;
  RingModelRun* run_;
  std::map<RingKey, Ring> rail_, nvl_, combine_, partial_;
};

}  // namespace

RingModelRun run_ring_model(const RingModelShape& shape, const std::vector<ref::Problem>& problems,
                            const std::vector<std::vector<std::vector<uint16_t>>>& combine_in,
                            const RingModelOptions& options) {
  RingModelRun run;
  Model model(shape, options, &run);
  for (size_t i = 0; i < problems.size(); ++i) {
    RingModelStep step;
    if (!model.step(problems[i], combine_in[i], &step)) {
      run.deadlocked = true;
      return run;
    }
    run.steps.push_back(std::move(step));
  }
  return run;
}

}  // namespace epc::test

// SPDX-License-Identifier: Apache-2.0
// A small streaming JSON writer: pretty-printed objects, arrays of scalars on one line,
// strings escaped, numbers in their shortest round-trip form, non-finite numbers as null.
// Misuse (a value where a key is due, unbalanced ends) is a bug in the caller and throws
// std::logic_error rather than producing invalid JSON. Pure CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epc::bench {

class JsonWriter {
 public:
  void begin_object();
  void end_object();
  // `inline_scalars`: keep the elements on one line (for short numeric arrays).
  void begin_array(bool inline_scalars = false);
  void end_array();
  void key(const std::string& name);

  void value(const std::string& text);
  void value(const char* text);
  void value(double number);
  void value(int64_t number);
  void value(int number) { value(static_cast<int64_t>(number)); }
  void value(bool flag);
  void null();

  // key + value in one call.
  template <typename T>
  void field(const std::string& name, const T& v) {
    key(name);
    value(v);
  }

  // The document; throws if a container is still open.
  const std::string& str() const;

 private:
  struct Level {
    bool is_object;
    bool inline_scalars;
    int count;
  };
  void before_value();
  void newline();

  std::string out_;
  std::vector<Level> stack_;
  bool key_pending_ = false;
  bool done_ = false;
};

std::string json_escape(const std::string& text);
std::string json_number(double number);

}  // namespace epc::bench

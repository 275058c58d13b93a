// SPDX-License-Identifier: Apache-2.0
#include "bench/json_writer.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace epc::bench {

std::string json_escape(const std::string& text) {
  std::string s = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        s += "\\\"";
        break;
      case '\\':
        s += "\\\\";
        break;
      case '\n':
        s += "\\n";
        break;
      case '\r':
        s += "\\r";
        break;
      case '\t':
        s += "\\t";
        break;
      default:
        if (c < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", c);
          s += u;
        } else {
          s += static_cast<char>(c);
        }
    }
  }
  return s + "\"";
}

std::string json_number(double number) {
  if (!std::isfinite(number)) return "null";
  char text[40];
  // Whole numbers without an exponent ("100", not "1e+02"), the rest in the fewest digits
  // that read back as the same double.
  if (number == std::floor(number) && std::fabs(number) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", number);
    return text;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, number);
    if (std::strtod(text, nullptr) == number) break;
  }
  return text;
}

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(stack_.size() * 2, ' ');
}

void JsonWriter::before_value() {
  if (done_) throw std::logic_error("JsonWriter: a second top-level value");
  if (stack_.empty()) return;
  Level& top = stack_.back();
  if (top.is_object) {
    if (!key_pending_) throw std::logic_error("JsonWriter: a value inside an object needs a key");
    key_pending_ = false;
    return;
  }
  if (top.count++ > 0) out_ += top.inline_scalars ? ", " : ",";
  if (!top.inline_scalars) newline();
}

void JsonWriter::key(const std::string& name) {
  if (stack_.empty() || !stack_.back().is_object || key_pending_) {
    throw std::logic_error("JsonWriter: key '" + name + "' outside an object or after a key");
  }
  if (stack_.back().count++ > 0) out_ += ',';
  newline();
  out_ += json_escape(name) + ": ";
  key_pending_ = true;
}

void JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back({true, false, 0});
}

void JsonWriter::begin_array(bool inline_scalars) {
  before_value();
  out_ += '[';
  stack_.push_back({false, inline_scalars, 0});
}

void JsonWriter::end_object() {
  if (stack_.empty() || !stack_.back().is_object || key_pending_) {
    throw std::logic_error("JsonWriter: end_object without a matching begin_object");
  }
  const bool empty = stack_.back().count == 0;
  stack_.pop_back();
  if (!empty) newline();
  out_ += '}';
  if (stack_.empty()) done_ = true;
}

void JsonWriter::end_array() {
  if (stack_.empty() || stack_.back().is_object) {
    throw std::logic_error("JsonWriter: end_array without a matching begin_array");
  }
  const Level level = stack_.back();
  stack_.pop_back();
  if (level.count > 0 && !level.inline_scalars) newline();
  out_ += ']';
  if (stack_.empty()) done_ = true;
}

void JsonWriter::value(const std::string& text) {
  before_value();
  out_ += json_escape(text);
  if (stack_.empty()) done_ = true;
}

void JsonWriter::value(const char* text) { value(std::string(text == nullptr ? "" : text)); }

void JsonWriter::value(double number) {
  before_value();
  out_ += json_number(number);
  if (stack_.empty()) done_ = true;
}

void JsonWriter::value(int64_t number) {
  before_value();
  out_ += std::to_string(number);
  if (stack_.empty()) done_ = true;
}

void JsonWriter::value(bool flag) {
  before_value();
  out_ += flag ? "true" : "false";
  if (stack_.empty()) done_ = true;
}

void JsonWriter::null() {
  before_value();
  out_ += "null";
  if (stack_.empty()) done_ = true;
}

const std::string& JsonWriter::str() const {
  if (!stack_.empty() || key_pending_) throw std::logic_error("JsonWriter: document not closed");
  return out_;
}

}  // namespace epc::bench

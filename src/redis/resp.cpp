#include "redis/resp.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cstring>

namespace sluice::redis::detail {

namespace {

void append_number(std::string& out, std::int64_t n) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, n);
  out.append(buf, r.ptr);
}

// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
constexpr std::array<std::uint16_t, 256> make_crc_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[i] = crc;
  }
  return table;
}

constexpr auto kCrcTable = make_crc_table();

std::uint16_t crc16(std::string_view s) {
  std::uint16_t crc = 0;
  for (const char c : s) {
    crc = static_cast<std::uint16_t>((crc << 8) ^
                                     kCrcTable[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
  }
  return crc;
}

}  // namespace

Command::Command(std::size_t args) : left_(args) {
  out_.reserve(32 + args * 24);
  out_.push_back('*');
  append_number(out_, static_cast<std::int64_t>(args));
  out_.append("\r\n");
}

Command& Command::arg(std::string_view s) {
  assert(left_ > 0);
  --left_;
  // "$<len>\r\n<s>\r\n": composed on the stack and appended once when short (the numbers and keys
  // of a script call), which took a tenth of the client's instructions per decision as five appends.
  char buf[96];
  buf[0] = '$';
  char* p = std::to_chars(buf + 1, buf + 24, s.size()).ptr;
  *p++ = '\r';
  *p++ = '\n';
  if (s.size() + 2 <= static_cast<std::size_t>(buf + sizeof buf - p)) {
    p = std::copy(s.begin(), s.end(), p);
    *p++ = '\r';
    *p++ = '\n';
    out_.append(buf, p);
  } else {
    out_.append(buf, p).append(s).append("\r\n", 2);
  }
  return *this;
}

Command& Command::arg(std::int64_t n) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, n);
  return arg(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

std::string Command::take() && {
  assert(left_ == 0);
  return std::move(out_);
}

std::string encode(std::initializer_list<std::string_view> args) {
  Command c(args.size());
  for (const std::string_view a : args) c.arg(a);
  return std::move(c).take();
}

Reply Reply::of_integer(std::int64_t n) {
  Reply r;
  r.type_ = Type::kInteger;
  r.integer_ = n;
  return r;
}

Reply Reply::of_text(Type type, std::string_view s) {
  Reply r;
  r.type_ = type;
  r.text_.assign(s);
  return r;
}

Reply Reply::of_array(std::vector<Reply> elements) {
  Reply r;
  r.type_ = Type::kArray;
  r.elements_ = std::move(elements);
  return r;
}

bool Reply::integers(std::size_t n) const {
  return type_ == Type::kArray && elements_.size() == n &&
         std::all_of(elements_.begin(), elements_.end(),
                     [](const Reply& e) { return e.type_ == Type::kInteger; });
}

namespace {

// Redis refuses bulk strings longer than its proto-max-bulk-len, 512 MB by default.
constexpr std::int64_t kMaxBulk = std::int64_t{512} << 20;
constexpr int kMaxDepth = 16;
// The smallest element an array can hold takes three bytes ("+\r\n").
constexpr std::size_t kMinElement = 3;

// An integer reply of up to 18 digits, whole (":-123\r\n"), read in one pass: the scripts answer
// with arrays of them. Where it ends, or nullptr for anything else (more digits, a partial or bad
// line), which the general path then reads.
const char* small_integer(const char* s, const char* end, std::int64_t& out) {
  ++s;  // the ':'
  const bool negative = s < end && *s == '-';
  if (negative) ++s;
  const char* digits = s;
  std::int64_t n = 0;
  while (s < end && *s >= '0' && *s <= '9' && s - digits < 18) n = n * 10 + (*s++ - '0');
  if (s == digits || end - s < 2 || s[0] != '\r' || s[1] != '\n') return nullptr;
  out = negative ? -n : n;
  return s + 2;
}

std::optional<std::int64_t> to_int(std::string_view s) {
  std::int64_t n = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), n);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return n;
}

}  // namespace

void ReplyReader::feed(const char* data, std::size_t n) {
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ >= 64 * 1024) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(data, n);
}

Result<std::optional<Reply>> ReplyReader::next() {
  if (error_.empty() && start_ < buffer_.size()) {
    std::size_t at = start_;
    Reply reply;
    if (parse(at, reply, 0) == Parsed::kDone) {  // else more bytes are needed, or error_ says why
      start_ = at;
      return std::optional<Reply>(std::move(reply));
    }
  }
  if (!error_.empty()) return Error{ErrorCode::kProtocol, "redis: unreadable reply: " + error_};
  return std::optional<Reply>();
}

std::optional<std::string_view> ReplyReader::line(std::size_t& at) const {
  const char* begin = buffer_.data() + at;
  const std::size_t left = buffer_.size() - at;
  const void* cr = std::memchr(begin, '\r', left);
  if (cr == nullptr) return std::nullopt;
  const auto n = static_cast<std::size_t>(static_cast<const char*>(cr) - begin);
  if (n + 1 >= left) return std::nullopt;  // the '\n' has not come yet
  at += n + 2;
  return std::string_view(begin, n);
}

// Parses the value that starts at `at` into `out`, and moves `at` past it. On kNeedMore, `at` and
// `out` are left as they are to be thrown away: the value is parsed again, whole, once more bytes
// have come.
ReplyReader::Parsed ReplyReader::parse(std::size_t& at, Reply& out, int depth) {
  if (at >= buffer_.size()) return Parsed::kNeedMore;
  const char kind = buffer_[at];
  if (kind == ':') {
    const char* end = buffer_.data() + buffer_.size();
    if (const char* past = small_integer(buffer_.data() + at, end, out.integer_)) {
      out.type_ = Reply::Type::kInteger;
      at = static_cast<std::size_t>(past - buffer_.data());
      return Parsed::kDone;
    }
  }
  std::size_t p = at + 1;
  const std::optional<std::string_view> head = line(p);
  if (!head) return Parsed::kNeedMore;
  if (buffer_[p - 1] != '\n') {
    error_ = "a line that does not end in CRLF";
    return Parsed::kBad;
  }
  switch (kind) {
    case '+': out = Reply::of_text(Reply::Type::kStatus, *head); break;
    case '-': out = Reply::of_text(Reply::Type::kError, *head); break;
    case ':': {
      const auto n = to_int(*head);
      if (!n) {
        error_ = "an integer that is not one: \"" + std::string(head->substr(0, 32)) + "\"";
        return Parsed::kBad;
      }
      out = Reply::of_integer(*n);
      break;
    }
    case '$': {
      const auto n = to_int(*head);
      if (!n || *n < -1 || *n > kMaxBulk) {
        error_ = "a bad string length: \"" + std::string(head->substr(0, 32)) + "\"";
        return Parsed::kBad;
      }
      if (*n == -1) {
        out = Reply();
        break;
      }
      const auto len = static_cast<std::size_t>(*n);
      if (buffer_.size() - p < len + 2) return Parsed::kNeedMore;
      if (buffer_[p + len] != '\r' || buffer_[p + len + 1] != '\n') {
        error_ = "a string longer than its length";
        return Parsed::kBad;
      }
      out = Reply::of_text(Reply::Type::kString, std::string_view(buffer_).substr(p, len));
      p += len + 2;
      break;
    }
    case '*': {
      const auto n = to_int(*head);
      if (!n || *n < -1) {
        error_ = "a bad array length: \"" + std::string(head->substr(0, 32)) + "\"";
        return Parsed::kBad;
      }
      if (*n == -1) {
        out = Reply();
        break;
      }
      if (depth == kMaxDepth) {
        error_ = "arrays nested deeper than " + std::to_string(kMaxDepth);
        return Parsed::kBad;
      }
      // Not all there yet, whatever the elements are: nothing to parse or allocate for now.
      const auto count = static_cast<std::size_t>(*n);
      if ((buffer_.size() - p) / kMinElement < count) return Parsed::kNeedMore;
      std::vector<Reply> elements(count);
      const char* const end = buffer_.data() + buffer_.size();
      for (Reply& e : elements) {
        // A small integer here, without a call: most elements are.
        if (buffer_[p] == ':') {
          if (const char* past = small_integer(buffer_.data() + p, end, e.integer_)) {
            e.type_ = Reply::Type::kInteger;
            p = static_cast<std::size_t>(past - buffer_.data());
            continue;
          }
        }
        if (const Parsed r = parse(p, e, depth + 1); r != Parsed::kDone) return r;
      }
      out = Reply::of_array(std::move(elements));
      break;
    }
    default:
      error_ = "a reply that starts with byte " + std::to_string(static_cast<unsigned char>(kind)) +
               (kind == 'H' ? " ('H': the server answers HTTP, not Redis's protocol: is this the right port?)" : "");
      return Parsed::kBad;
  }
  at = p;
  return Parsed::kDone;
}

int key_slot(std::string_view key) {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) & (kSlots - 1);
}

}  // namespace sluice::redis::detail

#include "gateway/message_parser.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

namespace sluice::gateway {

namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

// The most input a chunked body's framing may hold unparsed: a chunk's size line with its
// extensions, or the trailers.
constexpr std::size_t kChunkLineLimit = 64 * 1024;

// Character classes: digits, letters and the characters of `extra`.
constexpr std::array<bool, 256> alnum_and(std::string_view extra) {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (const char c : extra) t[static_cast<unsigned char>(c)] = true;
  return t;
}
// Tokens: field names and methods (RFC 9110 5.6.2).
constexpr std::array<bool, 256> kTchar = alnum_and("!#$%&'*+-.^_`|~");
// A method as the gateway takes it: a token with no lower-case letter (see parse_start_line).
constexpr std::array<bool, 256> kMethodChar = [] {
  std::array<bool, 256> t = kTchar;
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = false;
  return t;
}();
// A request target: visible ASCII (a URI's characters; others come percent-encoded), but '#'.
constexpr std::array<bool, 256> kTargetChar = [] {
  std::array<bool, 256> t{};
  for (int c = 0x21; c < 0x7f; ++c) t[static_cast<std::size_t>(c)] = c != '#';
  return t;
}();
// A reg-name's (RFC 3986 3.2.2): unreserved, percent-encoded and sub-delims.
constexpr std::array<bool, 256> kRegName = alnum_and("-._~%!$&'()*+,;=");

// Field values and reason phrases: visible characters, space, tab and obs-text (RFC 9110 5.5).
constexpr std::array<bool, 256> make_text() {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x7f; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = 0x80; c <= 0xff; ++c) t[static_cast<std::size_t>(c)] = true;
  t['\t'] = true;
  return t;
}
constexpr std::array<bool, 256> kText = make_text();

// A Content-Length: digits only, no larger than 2^64 - 1.
std::optional<std::uint64_t> length_of(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

}  // namespace

bool is_method(std::string_view v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return kMethodChar[static_cast<unsigned char>(c)]; });
}

bool is_target(std::string_view v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return kTargetChar[static_cast<unsigned char>(c)]; });
}

bool is_field_name(std::string_view v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return kTchar[static_cast<unsigned char>(c)]; });
}

bool is_field_value(std::string_view v) {
  return std::all_of(v.begin(), v.end(), [](char c) { return kText[static_cast<unsigned char>(c)]; });
}

bool is_host(std::string_view v) {
  std::size_t i = 0;
  if (!v.empty() && v[0] == '[') {
    const std::size_t close = v.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (std::size_t j = 1; j < close; ++j) {
      if (!kRegName[static_cast<unsigned char>(v[j])] && v[j] != ':') return false;
    }
    i = close + 1;
  } else {
    while (i < v.size() && kRegName[static_cast<unsigned char>(v[i])]) ++i;
  }
  if (i == v.size()) return true;
  if (v[i] != ':') return false;
  for (++i; i < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9') return false;
  }
  return true;
}

// A chunked body, decoded by Beast's parser: it is given a head of its own that says only
// "chunked", then the body bytes.
template <bool isRequest>
class ChunkDecoder final : public http::basic_parser<isRequest> {
 public:
  ChunkDecoder(http::buffer_body::value_type& body, std::optional<std::uint64_t> body_limit,
               std::size_t header_limit)
      : body_(body) {
    if (body_limit) {
      this->body_limit(*body_limit);
    } else {
      this->body_limit(boost::none);
    }
    this->header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(header_limit, UINT32_MAX)));
    static constexpr std::string_view kHead = isRequest ? "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                        : "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    error_code ec;
    this->put(boost::asio::const_buffer(kHead.data(), kHead.size()), ec);
  }

 private:
  using string_view = boost::beast::string_view;
  void on_request_impl(http::verb, string_view, string_view, int, error_code& ec) override { ec = {}; }
  void on_response_impl(int, string_view, int, error_code& ec) override { ec = {}; }
  void on_field_impl(http::field, string_view, string_view, error_code& ec) override { ec = {}; }  // trailers
  void on_header_impl(error_code& ec) override { ec = {}; }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code& ec) override { ec = {}; }
  std::size_t on_body_impl(string_view, error_code& ec) override {
    ec = {};
    return 0;
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code& ec) override { ec = {}; }
  std::size_t on_chunk_body_impl(std::uint64_t, string_view piece, error_code& ec) override {
    if (body_.data == nullptr) {
      ec = http::error::need_buffer;
      return 0;
    }
    const std::size_t n = std::min(piece.size(), body_.size);
    if (n > 0) std::memcpy(body_.data, piece.data(), n);
    body_.data = static_cast<char*>(body_.data) + n;
    body_.size -= n;
    ec = n == piece.size() ? error_code() : error_code(http::error::need_buffer);
    return n;
  }
  void on_finish_impl(error_code& ec) override { ec = {}; }

  http::buffer_body::value_type& body_;
};

template <bool isRequest>
MessageParser<isRequest>::MessageParser(HeadText& head) : head_(head) {
  head_.text.clear();
  head_.fields.clear();
}

template <bool isRequest>
MessageParser<isRequest>::~MessageParser() = default;

template <bool isRequest>
bool MessageParser<isRequest>::keep_alive() const {
  if (to_eof_) return false;
  return http11_ ? !close_ : keep_alive_ && !close_;
}

namespace {

// Whether a chunk's size line that Beast waits on (after the CRLF that ends the data before it)
// holds an extension whose quoted string is still open at the line's end: Beast reads on, past the
// CRLF, for the closing quote, which a quoted string may not span (RFC 9112 7.1.1).
bool opens_a_quote_it_does_not_close(std::string_view rest) {
  if (rest.starts_with("\r\n")) rest.remove_prefix(2);
  const std::size_t end = rest.find("\r\n");
  if (end == std::string_view::npos) return false;
  const std::string_view line = rest.substr(0, end);
  const std::size_t semicolon = line.find(';');
  if (semicolon == std::string_view::npos || semicolon == 0 ||
      line.substr(0, semicolon).find_first_not_of("0123456789abcdefABCDEF \t") != std::string_view::npos) {
    return false;  // not a size line with extensions (a trailer field's name holds no ';')
  }
  bool quoted = false;
  for (std::size_t i = semicolon; i < line.size(); ++i) {
    if (quoted && line[i] == '\\') {
      ++i;  // a quoted pair
    } else if (line[i] == '"') {
      quoted = !quoted;
    }
  }
  return quoted;
}

}  // namespace

template <bool isRequest>
std::size_t MessageParser<isRequest>::put(boost::asio::const_buffer input, error_code& ec) {
  const char* data = static_cast<const char*>(input.data());
  const std::size_t size = input.size();
  ec = {};
  if (size > 0 && state_ != State::kHead) got_some_ = true;
  switch (state_) {
    case State::kHead:
      return put_head(data, size, ec);
    case State::kLength:
    case State::kToEof:
      return put_body(data, size, ec);
    case State::kChunked: {
      const std::size_t used = chunks_->put(input, ec);
      if (chunks_->is_done()) state_ = State::kDone;
      if (ec == http::error::need_more) {
        // Beast bounds neither a chunk's size line (its extensions) nor the trailers: what it cannot
        // use of this much input, it never will. Nor does it refuse a line that ends in a bare LF:
        // it waits for a CRLF that does not come. (What it waits on is a line: data it takes.)
        // Beast takes nothing of a line until it is whole, and the caller passes it again with more:
        // only what came since the last look is looked at.
        const std::string_view rest(data + used, size - used);
        const std::size_t from = used == 0 ? std::min(chunk_scanned_, rest.size()) : 0;
        for (std::size_t lf = rest.find('\n', from); lf != std::string_view::npos; lf = rest.find('\n', lf + 1)) {
          if (lf == 0 || rest[lf - 1] != '\r') ec = http::error::bad_chunk;
        }
        chunk_scanned_ = rest.size();
        if (size >= kChunkLineLimit || opens_a_quote_it_does_not_close(rest)) ec = http::error::bad_chunk;
      }
      return used;
    }
    case State::kDone:
      ec = http::error::stale_parser;
      return 0;
  }
  return 0;
}

template <bool isRequest>
void MessageParser<isRequest>::put_eof(error_code& ec) {
  ec = {};
  if (state_ == State::kToEof) {
    state_ = State::kDone;
  } else if (state_ != State::kDone) {
    ec = http::error::partial_message;
  }
}

template <bool isRequest>
void MessageParser<isRequest>::read_request_line(boost::asio::const_buffer input)
  requires isRequest
{
  if (state_ != State::kHead || !head_.text.empty()) return;
  std::string_view in(static_cast<const char*>(input.data()), std::min(input.size(), header_limit_));
  while (in.starts_with("\r\n")) in.remove_prefix(2);
  const std::size_t end = in.find("\r\n");
  if (end == std::string_view::npos) return;
  head_.text.assign(in.substr(0, end + 2));
  const char* p = head_.text.data();
  const error_code ec = parse_start_line(p);
  // A line with a good method and target but no version, or another (HTTP/0.9's "GET /", "GET /
  // HTTP/2.0"), says those two; one that is not a request line at all, nothing.
  if (ec == http::error::bad_version && !target_.empty()) {
    http11_ = true;
  } else if (ec) {
    method_ = http::verb::unknown;
    method_string_ = {};
    target_ = {};
    http11_ = true;
    head_.text.clear();
  }
}

template <bool isRequest>
std::size_t MessageParser<isRequest>::put_head(const char* data, std::size_t size, error_code& ec) {
  std::string_view in(data, size);
  // Empty lines before a request line are ignored (RFC 9112 2.2): a client may send one after a body
  // (and one that sends nothing else and closes has sent nothing).
  std::size_t skipped = 0;
  if constexpr (isRequest) {
    while (in.substr(skipped, 2) == "\r\n") skipped += 2;
  }
  if (size > skipped) got_some_ = true;
  if constexpr (!isRequest) {
    // Bytes that cannot begin a response (another protocol, an error text) are refused as they
    // come, rather than waited on for a CRLF CRLF or taken, at a close, for a connection that broke.
    constexpr std::string_view kName = "HTTP/";
    if (in.substr(0, kName.size()) != kName.substr(0, std::min(size, kName.size()))) {
      ec = http::error::bad_version;
      return 0;
    }
  }
  const std::size_t from = std::max(scanned_, skipped);
  const std::size_t end = in.find("\r\n\r\n", from);
  if (end == std::string_view::npos) {
    // A head whose lines end in a bare LF, or hold a bare CR, would never end in CRLF CRLF: refused
    // now rather than timed out (parse_head refuses one in a head that does end).
    for (std::size_t lf = in.find('\n', from); lf != std::string_view::npos; lf = in.find('\n', lf + 1)) {
      if (lf == 0 || in[lf - 1] != '\r') {
        ec = http::error::bad_line_ending;
        return 0;
      }
    }
    for (std::size_t cr = in.find('\r', from); cr != std::string_view::npos && cr + 1 < size; cr = in.find('\r', cr + 1)) {
      if (in[cr + 1] != '\n') {
        ec = http::error::bad_line_ending;
        return 0;
      }
    }
    // A request line that came whole and is not one ("GET /", which HTTP/0.9 sent, or a version
    // this is not) is refused now, as nginx does, rather than waited on for the rest of a head
    // until the header timeout. Read apart from the head (read_request_line reads it again).
    if constexpr (isRequest) {
      const std::size_t eol = line_checked_ ? std::string_view::npos : in.find("\r\n", skipped);
      if (eol != std::string_view::npos && eol < header_limit_) {
        line_checked_ = true;
        head_.text.assign(in.substr(skipped, eol + 2 - skipped));
        const char* p = head_.text.data();
        const error_code line_ec = parse_start_line(p);
        head_.text.clear();
        method_ = http::verb::unknown;
        method_string_ = {};
        target_ = {};
        http11_ = true;
        if (line_ec) {
          ec = line_ec;
          return 0;
        }
      }
    }
    if (size >= header_limit_) {
      ec = http::error::header_limit;
      return 0;
    }
    scanned_ = size >= 3 ? size - 3 : 0;
    ec = http::error::need_more;
    return 0;
  }
  const std::size_t used = end + 4;
  if (used > header_limit_) {
    ec = http::error::header_limit;
    return 0;
  }
  head_.text.assign(in.data() + skipped, used - skipped);
  ec = parse_head(head_.text);
  if (!ec) ec = frame();
  return ec ? 0 : used;
}

// One pass over the head, which ends in CRLF CRLF: every scan stops at a CR at the latest (no class
// of characters below takes one), so none runs past the end.
template <bool isRequest>
error_code MessageParser<isRequest>::parse_head(std::string_view head) {
  const char* p = head.data();
  if (error_code ec = parse_start_line(p)) return ec;
  while (true) {
    if (p[0] == '\r') return p[1] == '\n' ? error_code() : error_code(http::error::bad_line_ending);
    if (p[0] == ' ' || p[0] == '\t') return http::error::bad_obs_fold;
    const char* name = p;
    while (kTchar[static_cast<unsigned char>(*p)]) ++p;
    // No whitespace between the name and the colon (RFC 9112 5.1).
    if (p == name || *p != ':') return http::error::bad_field;
    const std::string_view name_string(name, static_cast<std::size_t>(p - name));
    ++p;
    while (*p == ' ' || *p == '\t') ++p;
    const char* value = p;
    while (kText[static_cast<unsigned char>(*p)]) ++p;
    if (p[0] != '\r' || p[1] != '\n') return http::error::bad_value;
    const char* value_end = p;
    while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t')) --value_end;
    p += 2;
    if (error_code ec = add_field(name_string, std::string_view(value, static_cast<std::size_t>(value_end - value)))) {
      return ec;
    }
  }
}

template <bool isRequest>
error_code MessageParser<isRequest>::parse_start_line(const char*& p) {
  // Compared a character at a time: the first that differs stops it, at the final CR at the latest.
  // HTTP-version = "HTTP/" DIGIT "." DIGIT: HTTP/1.1 (or later) or 1.0. Another major version is
  // not one this speaks (version_unsupported_).
  const auto version = [&]() -> std::optional<bool> {
    static constexpr std::string_view kHttp = "HTTP/";
    for (std::size_t i = 0; i < kHttp.size(); ++i) {
      if (p[i] != kHttp[i]) return std::nullopt;
    }
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (!digit(p[5]) || p[6] != '.' || !digit(p[7])) return std::nullopt;
    if (p[5] != '1') {
      version_unsupported_ = p[8] == '\r' && p[9] == '\n';
      return std::nullopt;
    }
    p += 8;
    return p[-1] != '0';
  };
  if constexpr (isRequest) {
    // method SP request-target SP HTTP-version CRLF
    // A method is case-sensitive (RFC 9110 9.1): "get" is not GET to the interfaces here, but is to
    // some servers, which would reach through a catch-all what GET may not. Refused, as nginx does.
    const char* method = p;
    while (kMethodChar[static_cast<unsigned char>(*p)]) ++p;
    if (p == method || *p != ' ') return http::error::bad_method;
    method_string_ = std::string_view(method, static_cast<std::size_t>(p - method));
    method_ = http::string_to_verb(method_string_);
    // The target is visible ASCII (RFC 9112 3.2: a URI's characters; others come percent-encoded),
    // with no fragment ('#'), which a request does not carry and servers would cut the path at.
    const char* target = ++p;
    while (kTargetChar[static_cast<unsigned char>(*p)]) ++p;
    // A line that ends after its target has no version (HTTP/0.9's "GET /"): the version is bad.
    if (p != target && *p == '\r') {
      target_ = std::string_view(target, static_cast<std::size_t>(p - target));
      return http::error::bad_version;
    }
    if (p == target || *p != ' ') return http::error::bad_target;
    target_ = std::string_view(target, static_cast<std::size_t>(p - target));
    ++p;
    const auto v = version();
    if (!v) return http::error::bad_version;
    http11_ = *v;
  } else {
    // HTTP-version SP status-code SP [ reason-phrase ] CRLF; a missing SP after the code is let pass.
    const auto v = version();
    if (!v || *p != ' ') return http::error::bad_version;
    http11_ = *v;
    ++p;
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (p[0] < '1' || p[0] > '9' || !digit(p[1]) || !digit(p[2])) return http::error::bad_status;
    status_ = static_cast<unsigned>((p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0'));
    p += 3;
    if (*p != ' ' && *p != '\r') return http::error::bad_status;
    if (*p == ' ') {
      const char* reason = ++p;
      while (kText[static_cast<unsigned char>(*p)]) ++p;
      reason_ = std::string_view(reason, static_cast<std::size_t>(p - reason));
    }
  }
  if (p[0] != '\r' || p[1] != '\n') return isRequest ? http::error::bad_version : http::error::bad_reason;
  p += 2;
  return {};
}

template <bool isRequest>
error_code MessageParser<isRequest>::add_field(std::string_view name, std::string_view value) {
  const http::field known = http::string_to_field(name);
  head_.fields.emplace_back(known, name, value);
  switch (known) {
    case http::field::connection:
    case http::field::proxy_connection:
      for_each_token(value, [&](std::string_view token) {
        if (boost::beast::iequals(token, "close")) close_ = true;
        if (boost::beast::iequals(token, "keep-alive")) keep_alive_ = true;
      });
      return {};
    case http::field::host:
      if constexpr (isRequest) {
        // One Host, with a value that is one (RFC 9112 3.2): a proxy passing two, or a bad one, on
        // lets the upstream and the gateway each read a different one.
        if (++hosts_ > 1 || !is_host(value)) return http::error::bad_value;
      }
      return {};
    case http::field::content_length: {
      const auto length = length_of(value);
      if (!length) return http::error::bad_content_length;
      if (content_length_ && *content_length_ != *length) return http::error::multiple_content_length;
      content_length_ = length;
      return {};
    }
    case http::field::transfer_encoding: {
      ++transfer_encodings_;
      // The last coding says whether the body is chunked (RFC 9112 6.1).
      std::string_view last;
      for_each_token(value, [&](std::string_view token) { last = token; });
      chunked_ = boost::beast::iequals(last, "chunked");
      transfer_coded_ = transfer_coded_ || transfer_encodings_ > 1 || !boost::beast::iequals(value, "chunked");
      if constexpr (isRequest) {
        // A request's body length must not be guessed at: "chunked" alone, once, or nothing.
        if (transfer_coded_) return http::error::bad_transfer_encoding;
      }
      return {};
    }
    default:
      return {};
  }
}

// The body's framing (RFC 9112 6.3), once the head is in.
template <bool isRequest>
error_code MessageParser<isRequest>::frame() {
  if constexpr (isRequest) {
    if (http11_ && hosts_ == 0) return http::error::bad_value;  // RFC 9112 3.2: a 400
  }
  if (transfer_encodings_ > 0 && content_length_) return http::error::bad_transfer_encoding;
  // HTTP/1.0 has no Transfer-Encoding: its framing is faulty (RFC 9112 6.1). A request is refused;
  // a response's connection ends with it.
  if (transfer_encodings_ > 0 && !http11_) {
    if constexpr (isRequest) return http::error::bad_transfer_encoding;
    close_ = true;
  }
  if (transfer_encodings_ > 0) content_length_.reset();
  bool no_body = false;
  if constexpr (isRequest) {
    no_body = !chunked_ && content_length_.value_or(0) == 0;
  } else {
    no_body = skip_ || status_ / 100 == 1 || status_ == 204 || status_ == 304 ||
              (!chunked_ && content_length_ == std::uint64_t{0});
  }
  if (no_body) {
    state_ = State::kDone;
    return {};
  }
  if (chunked_) {
    chunks_ = std::make_unique<ChunkDecoder<isRequest>>(body_, body_limit_, header_limit_);
    state_ = State::kChunked;
    return {};
  }
  if (content_length_) {
    if (body_limit_ && *content_length_ > *body_limit_) return http::error::body_limit;
    remaining_ = *content_length_;
    state_ = State::kLength;
    return {};
  }
  // A response with neither: its body runs to the connection's end (a request's is empty, above).
  to_eof_ = true;
  state_ = State::kToEof;
  return {};
}

template <bool isRequest>
std::size_t MessageParser<isRequest>::put_body(const char* data, std::size_t size, error_code& ec) {
  if (body_.data == nullptr) {
    ec = http::error::need_buffer;
    return 0;
  }
  std::size_t n = std::min(size, body_.size);
  if (state_ == State::kLength) n = static_cast<std::size_t>(std::min<std::uint64_t>(n, remaining_));
  if (n > 0) std::memcpy(body_.data, data, n);
  body_.data = static_cast<char*>(body_.data) + n;
  body_.size -= n;
  if (state_ == State::kLength) {
    remaining_ -= n;
    if (remaining_ == 0) state_ = State::kDone;
  } else if (body_limit_ && (to_eof_received_ += n) > *body_limit_) {
    ec = http::error::body_limit;
    return n;
  }
  ec = n < size && state_ != State::kDone ? error_code(http::error::need_buffer) : error_code();
  return n;
}

template class MessageParser<true>;
template class MessageParser<false>;

}  // namespace sluice::gateway

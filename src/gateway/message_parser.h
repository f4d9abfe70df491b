#pragma once
// The data plane's HTTP/1.1 message parser. The head (start line and fields) is parsed here, in one
// pass over a copy kept in text a connection reuses from message to message, strictly: CRLF line
// ends only, no obs-fold, no whitespace before a field's colon, no control characters, a request
// target in visible ASCII, and a request's Host once with a host's characters (and there in
// HTTP/1.1). The framing
// follows RFC 9112 section 6.3, refusing what a proxy must not guess at: a request's
// Transfer-Encoding other than exactly "chunked" (or in HTTP/1.0), Transfer-Encoding next to
// Content-Length, and two different Content-Lengths. A chunked body is decoded by Beast's parser
// (with a bound on its size lines and trailers, which Beast has not); a body with a length, or
// one that runs to the connection's end, is passed through here. Body bytes go to a buffer the
// caller provides, as with http::buffer_body.
//
// The interface is Beast's http::basic_parser's, as far as the gateway uses it (put, put_eof,
// got_some, is_header_done, is_done, keep_alive, chunked, content_length, skip, the limits), with
// the same error codes (http::error): Beast's parser, generic over its callbacks and its field
// container, was a sixth of a proxied request's CPU.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/system/error_code.hpp>

namespace sluice::gateway {

// One field of a parsed head, as it came (the name in its own case, the value without the
// whitespace around it).
class HeadField {
 public:
  HeadField(boost::beast::http::field name, std::string_view name_string, std::string_view value)
      : name_(name), name_string_(name_string), value_(value) {}
  boost::beast::http::field name() const { return name_; }
  std::string_view name_string() const { return name_string_; }
  std::string_view value() const { return value_; }

 private:
  boost::beast::http::field name_;
  std::string_view name_string_;
  std::string_view value_;
};

// Where a parser keeps its head. One per connection and direction: a new parser clears it, and past
// the connection's largest head parsing allocates nothing.
struct HeadText {
  std::string text;
  std::vector<HeadField> fields;
};

// Calls f(token) for each element of a field's comma-separated list (RFC 9110 5.6.1), without the
// whitespace around it, skipping empty ones.
template <class F>
void for_each_token(std::string_view list, F&& f) {
  for (std::size_t start = 0; start <= list.size();) {
    std::size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    std::string_view token = list.substr(start, end - start);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty()) f(token);
    start = end + 1;
  }
}

// Whether v is a Host field's value (RFC 9110 7.2), or an absolute-form target's authority:
// uri-host [":" port], or empty. uri-host is an IP-literal ("[" an IPv6 address, or IPvFuture,
// with a zone id's "%25" "]") or a reg-name (unreserved, percent-encoded and sub-delims characters,
// an IPv4 address among them); port is digits (none is allowed). Its shape, not what it names.
bool is_host(std::string_view v);
// A method as the request line is read: a token with no lower-case letter.
bool is_method(std::string_view v);
// A request target's characters as the request line is read: visible ASCII, no '#'.
bool is_target(std::string_view v);
// A field's name (a token) and value (visible characters, space, tab and obs-text) as the parser
// reads them.
bool is_field_name(std::string_view v);
bool is_field_value(std::string_view v);

template <bool isRequest>
class ChunkDecoder;

// Views it returns are valid until the next parser over the same HeadText is made. A parser that
// failed in the head answers with what it had read of it.
template <bool isRequest>
class MessageParser {
 public:
  using error_code = boost::system::error_code;

  explicit MessageParser(HeadText& head);
  ~MessageParser();
  MessageParser(const MessageParser&) = delete;
  MessageParser& operator=(const MessageParser&) = delete;

  // The most a head may take (start line, fields and the empty line), and a body (none: no limit).
  void header_limit(std::size_t bytes) { header_limit_ = bytes; }
  void body_limit(std::optional<std::uint64_t> bytes) { body_limit_ = bytes; }
  // A response with no body whatever its fields say (the answer to a HEAD request). Before put().
  void skip(bool v) { skip_ = v; }

  // Parses what `input` holds and returns the bytes it used: the head once it is all there (then
  // stops), and after it the body, as far as body() has room. ec: http::error::need_more when it
  // takes more input to go on (nothing of an incomplete head is used), http::error::need_buffer
  // when body() is full, or why the message is bad.
  std::size_t put(boost::asio::const_buffer input, error_code& ec);
  // The connection's end: ends a body that runs to it; before the end of a message, ec is
  // http::error::partial_message.
  void put_eof(error_code& ec);
  // A request whose head did not end (its client stopped sending it, or it outgrew the limit): reads
  // its request line from `input`, what came of the head, when the line came whole and is one, for
  // method(), method_string(), target() and http11(): the answer goes in the client's version, and
  // the log says what the request was. A line with a good method and target and a version missing
  // or other (put() refuses it at once, not waiting for the head's end) says those two, in HTTP/1.1.
  // Nothing once a head has ended (it was parsed, as far as it went).
  void read_request_line(boost::asio::const_buffer input)
    requires isRequest;

  bool got_some() const { return got_some_; }
  bool is_header_done() const { return state_ > State::kHead; }
  bool is_done() const { return state_ == State::kDone; }
  // Once the head is in: whether the connection carries on after this message.
  bool keep_alive() const;
  bool chunked() const { return chunked_; }
  // Transfer-Encoding gives more than "chunked" alone (a request with such is refused).
  bool transfer_coded() const { return transfer_coded_; }
  std::optional<std::uint64_t> content_length() const { return content_length_; }
  // Once the head is in: HTTP/1.1, rather than 1.0. (A later HTTP/1.x is taken as 1.1, RFC 9112
  // 2.3.)
  bool http11() const { return http11_; }
  // The message failed for its version, which is well-formed but not HTTP/1 ("HTTP/2.0" in a
  // request line: RFC 9110 15.6.6's 505).
  bool version_unsupported() const { return version_unsupported_; }

  // Requests.
  boost::beast::http::verb method() const { return method_; }
  std::string_view method_string() const { return method_string_; }
  std::string_view target() const { return target_; }
  // Responses.
  unsigned status() const { return status_; }
  std::string_view reason() const { return reason_; }

  std::span<const HeadField> fields() const { return head_.fields; }

  // Where the body goes: the parser writes to data, advancing it and shrinking size, and stops with
  // http::error::need_buffer when size is 0 or data null.
  boost::beast::http::buffer_body::value_type& body() { return body_; }

 private:
  enum class State { kHead, kLength, kChunked, kToEof, kDone };

  std::size_t put_head(const char* data, std::size_t size, error_code& ec);
  error_code parse_head(std::string_view head);
  error_code parse_start_line(const char*& p);
  error_code add_field(std::string_view name, std::string_view value);
  error_code frame();
  std::size_t put_body(const char* data, std::size_t size, error_code& ec);

  HeadText& head_;
  std::size_t header_limit_ = 8 * 1024;
  std::optional<std::uint64_t> body_limit_ = 1024 * 1024;
  bool skip_ = false;

  State state_ = State::kHead;
  bool got_some_ = false;
  std::size_t scanned_ = 0;  // bytes of an incomplete head already searched for its end
  bool line_checked_ = false;  // the request line of an incomplete head was checked

  boost::beast::http::verb method_ = boost::beast::http::verb::unknown;
  std::string_view method_string_;
  std::string_view target_;
  unsigned status_ = 0;
  std::string_view reason_;
  bool http11_ = true;
  bool version_unsupported_ = false;
  bool close_ = false;       // "Connection: close"
  bool keep_alive_ = false;  // "Connection: keep-alive"
  std::optional<std::uint64_t> content_length_;
  std::uint64_t remaining_ = 0;  // of a body with a length
  bool chunked_ = false;
  int transfer_encodings_ = 0;
  bool transfer_coded_ = false;
  int hosts_ = 0;  // Host fields (requests)
  bool to_eof_ = false;  // a response whose body runs to the connection's end
  std::uint64_t to_eof_received_ = 0;

  std::unique_ptr<ChunkDecoder<isRequest>> chunks_;
  std::size_t chunk_scanned_ = 0;  // bytes of an incomplete chunk line already searched for a bare LF
  boost::beast::http::buffer_body::value_type body_{};
};

extern template class MessageParser<true>;
extern template class MessageParser<false>;

using RequestParser = MessageParser<true>;
using ResponseParser = MessageParser<false>;

}  // namespace sluice::gateway

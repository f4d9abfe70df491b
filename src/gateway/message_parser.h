#pragma once
// The data plane's HTTP/1.1 message parser: Beast's basic_parser (framing, limits, validation) with
// the head kept as offsets into one piece of text that a connection reuses from message to message,
// where Beast's http::parser inserts every field into an allocated tree (about a tenth of a proxied
// request's CPU, for two heads). The body goes to a buffer the caller provides, as with
// http::buffer_body.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

namespace sluice::gateway {

// One field of a parsed head, as it came (the name in its own case, the value trimmed).
class HeadField {
 public:
  boost::beast::http::field name() const { return name_; }
  std::string_view name_string() const { return {text_ + name_at_, name_size_}; }
  std::string_view value() const { return {text_ + value_at_, value_size_}; }

 private:
  template <bool isRequest>
  friend class MessageParser;
  boost::beast::http::field name_ = boost::beast::http::field::unknown;
  const char* text_ = nullptr;  // where HeadText::text is now (set by MessageParser::fields)
  std::uint32_t name_at_ = 0;
  std::uint32_t name_size_ = 0;
  std::uint32_t value_at_ = 0;
  std::uint32_t value_size_ = 0;
};

// Where a parser keeps its head. One per connection and direction: a new parser clears it, and past
// the connection's largest head parsing allocates nothing.
struct HeadText {
  std::string text;
  std::vector<HeadField> fields;
};

// Views it returns are valid until the next parser over the same HeadText is made. A parser that
// failed before the end of the head answers with what it had read.
template <bool isRequest>
class MessageParser final : public boost::beast::http::basic_parser<isRequest> {
 public:
  explicit MessageParser(HeadText& head) : head_(head) {
    head_.text.clear();
    head_.fields.clear();
  }

  // Requests.
  boost::beast::http::verb method() const { return method_; }
  std::string_view method_string() const { return text(first_); }
  std::string_view target() const { return text(second_); }
  // Responses.
  unsigned status() const { return status_; }
  std::string_view reason() const { return text(second_); }

  std::span<const HeadField> fields() const;

  // Where the body goes: the parser writes to data, advancing it and shrinking size, and stops with
  // http::error::need_buffer when size is 0 or data null.
  boost::beast::http::buffer_body::value_type& body() { return body_; }

 private:
  using error_code = boost::beast::error_code;
  struct Span {
    std::uint32_t at = 0;
    std::uint32_t size = 0;
  };
  Span keep(std::string_view s);
  std::string_view text(Span s) const { return std::string_view(head_.text).substr(s.at, s.size); }

  void on_request_impl(boost::beast::http::verb method, boost::beast::string_view method_string, boost::beast::string_view target,
                       int version, error_code& ec) override;
  void on_response_impl(int status, boost::beast::string_view reason, int version, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, boost::beast::string_view name_string, boost::beast::string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override { ec = {}; }
  void on_body_init_impl(const boost::optional<std::uint64_t>& /*content_length*/, error_code& ec) override { ec = {}; }
  std::size_t on_body_impl(boost::beast::string_view body, error_code& ec) override { return write_body(body, ec); }
  void on_chunk_header_impl(std::uint64_t /*size*/, boost::beast::string_view /*extensions*/, error_code& ec) override {
    ec = {};
  }
  std::size_t on_chunk_body_impl(std::uint64_t /*remain*/, boost::beast::string_view body, error_code& ec) override {
    return write_body(body, ec);
  }
  void on_finish_impl(error_code& ec) override { ec = {}; }
  std::size_t write_body(boost::beast::string_view body, error_code& ec);

  HeadText& head_;
  boost::beast::http::verb method_ = boost::beast::http::verb::unknown;
  unsigned status_ = 0;
  Span first_;   // the method
  Span second_;  // the target, or the reason
  boost::beast::http::buffer_body::value_type body_{};
};

extern template class MessageParser<true>;
extern template class MessageParser<false>;

using RequestParser = MessageParser<true>;
using ResponseParser = MessageParser<false>;

}  // namespace sluice::gateway

#include "gateway/message_parser.h"

#include <algorithm>
#include <cstring>

#include <boost/beast/http/error.hpp>

namespace sluice::gateway {

template <bool isRequest>
std::span<const HeadField> MessageParser<isRequest>::fields() const {
  // The text may have moved as it grew (and the last field is new since the last call, or was set
  // with the others): the fields learn where it is now.
  if (!head_.fields.empty() && head_.fields.back().text_ != head_.text.data()) {
    for (HeadField& f : head_.fields) f.text_ = head_.text.data();
  }
  return head_.fields;
}

template <bool isRequest>
typename MessageParser<isRequest>::Span MessageParser<isRequest>::keep(std::string_view s) {
  // The parser's header limit (at most 64 KiB here) keeps every offset far inside 32 bits.
  const Span span{static_cast<std::uint32_t>(head_.text.size()), static_cast<std::uint32_t>(s.size())};
  head_.text.append(s);
  return span;
}

template <bool isRequest>
void MessageParser<isRequest>::on_request_impl(boost::beast::http::verb method, boost::beast::string_view method_string,
                                               boost::beast::string_view target, int /*version*/, error_code& ec) {
  method_ = method;
  first_ = keep(method_string);
  second_ = keep(target);
  ec = {};
}

template <bool isRequest>
void MessageParser<isRequest>::on_response_impl(int status, boost::beast::string_view reason, int /*version*/,
                                                error_code& ec) {
  status_ = static_cast<unsigned>(status);
  second_ = keep(reason);
  ec = {};
}

template <bool isRequest>
void MessageParser<isRequest>::on_field_impl(boost::beast::http::field name, boost::beast::string_view name_string,
                                             boost::beast::string_view value, error_code& ec) {
  HeadField& f = head_.fields.emplace_back();
  f.name_ = name;
  const Span n = keep(name_string);
  const Span v = keep(value);
  f.name_at_ = n.at;
  f.name_size_ = n.size;
  f.value_at_ = v.at;
  f.value_size_ = v.size;
  ec = {};
}

// As http::buffer_body's reader does.
template <bool isRequest>
std::size_t MessageParser<isRequest>::write_body(boost::beast::string_view body, error_code& ec) {
  if (body_.data == nullptr) {
    ec = boost::beast::http::error::need_buffer;
    return 0;
  }
  const std::size_t n = std::min(body.size(), body_.size);
  if (n > 0) std::memcpy(body_.data, body.data(), n);
  body_.data = static_cast<char*>(body_.data) + n;
  body_.size -= n;
  ec = n == body.size() ? error_code() : error_code(boost::beast::http::error::need_buffer);
  return n;
}

template class MessageParser<true>;
template class MessageParser<false>;

}  // namespace sluice::gateway

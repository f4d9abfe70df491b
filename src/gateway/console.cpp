#include "gateway/console.h"

#include <algorithm>
#include <string>

namespace sluice::gateway {
namespace {

// Scripts, styles, images and API calls from this origin only; no inline script or style, no
// plugins, no framing.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

// Whether an If-None-Match header value names tag (or is *).
bool none_match(std::string_view header, std::string_view tag) {
  while (!header.empty()) {
    const std::size_t comma = header.find(',');
    std::string_view t = header.substr(0, comma);
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    if (t.starts_with("W/")) t.remove_prefix(2);
    if (t == "*" || t == tag) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

std::string_view content_type_of(std::string_view path) {
  if (path.ends_with(".html")) return "text/html; charset=utf-8";
  if (path.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (path.ends_with(".css")) return "text/css; charset=utf-8";
  if (path.ends_with(".svg")) return "image/svg+xml";
  if (path.ends_with(".json")) return "application/json";
  if (path.ends_with(".webmanifest")) return "application/manifest+json";
  if (path.ends_with(".png")) return "image/png";
  if (path.ends_with(".txt")) return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

AdminResponse serve_console(const AdminRequest& request) {
  std::string_view path = request.target;
  path = path.substr(0, path.find('?'));
  if (path == "/") path = "/index.html";
  const auto assets = web_assets();
  const auto it = std::find_if(assets.begin(), assets.end(), [&](const WebAsset& a) { return a.path == path; });
  AdminResponse r;
  r.headers = {{"Content-Security-Policy", std::string(kContentSecurityPolicy)},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "no-referrer"}};
  if (it == assets.end()) {
    r.status = 404;
    r.body = R"({"code":404,"reason":"not_found","msg":"No such page: the console is at /."})";
    r.headers.emplace_back("Cache-Control", "no-store");
    return r;
  }
  // The files change only with the binary: the browser keeps them and asks whether they changed.
  const std::string tag = "\"" + std::string(it->sha256.substr(0, 20)) + "\"";
  r.headers.emplace_back("ETag", tag);
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.content_type = std::string(content_type_of(it->path));
  if (none_match(request.header("If-None-Match"), tag)) {
    r.status = 304;
    return r;
  }
  r.body = std::string(it->body);
  return r;
}

}  // namespace sluice::gateway

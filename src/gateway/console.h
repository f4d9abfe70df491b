// The web console: the files of web/, embedded at build time (embed_web.cmake), served on the admin
// listener at / with their content types, ETags (304 when unchanged) and a strict Content-Security-Policy.
// Thread-safe: the files are constants and serve_console holds no state.
#pragma once

#include <span>
#include <string_view>

#include "gateway/gateway.h"

namespace sluice::gateway {

// One embedded file: its path under web/ with a leading slash ("/assets/app.js"), its bytes, and the
// SHA-256 of its bytes in hex.
struct WebAsset {
  std::string_view path;
  std::string_view body;
  std::string_view sha256;
};

// Every file of web/, sorted by path.
std::span<const WebAsset> web_assets();

// The Content-Type for a file name, by its extension.
std::string_view content_type_of(std::string_view path);

// Answers a GET for the console: "/" is /index.html, any other path an embedded file, or 404.
AdminResponse serve_console(const AdminRequest& request);

}  // namespace sluice::gateway

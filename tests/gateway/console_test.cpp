// The web console's files as the admin listener serves them, without a browser: every file of web/ is
// embedded with its content type, / is the page, ETags answer 304, every answer carries the
// Content-Security-Policy, unknown paths are 404, and the admin API keeps its own routes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gateway/console.h"
#include "gateway/gateway.h"
#include "http_client.h"
#include "load_config.h"

namespace sluice::gateway {
namespace {

using testing::HttpClient;
using testing::HttpResponse;

AdminRequest get(std::string target, std::vector<std::pair<std::string, std::string>> headers = {}) {
  return AdminRequest{"GET", std::move(target), "", std::move(headers), true};
}

std::string header(const AdminResponse& r, std::string_view name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "";
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(ConsoleTest, EveryFileOfWebIsEmbeddedWithTheSameBytes) {
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(SLUICE_WEB_DIR)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    const std::string path = "/" + std::filesystem::relative(entry.path(), SLUICE_WEB_DIR).generic_string();
    const AdminResponse r = serve_console(get(path));
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.body, read_file(entry.path())) << path;
  }
  EXPECT_EQ(web_assets().size(), files);
}

TEST(ConsoleTest, TheRootIsThePageAndEachFileHasItsContentType) {
  const AdminResponse page = serve_console(get("/"));
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<!doctype html>"), std::string::npos);
  EXPECT_EQ(serve_console(get("/?lang=zh-CN")).body, page.body);
  EXPECT_EQ(serve_console(get("/assets/app.js")).content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(serve_console(get("/assets/app.css")).content_type, "text/css; charset=utf-8");
  EXPECT_EQ(serve_console(get("/favicon.svg")).content_type, "image/svg+xml");
  EXPECT_EQ(content_type_of("/x.json"), "application/json");
  EXPECT_EQ(content_type_of("/x.bin"), "application/octet-stream");
}

TEST(ConsoleTest, EveryAnswerCarriesAStrictContentSecurityPolicy) {
  for (const std::string path : {"/", "/assets/app.js", "/nope"}) {
    const AdminResponse r = serve_console(get(path));
    const std::string csp = header(r, "Content-Security-Policy");
    EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << path;
    EXPECT_NE(csp.find("script-src 'self';"), std::string::npos) << path;
    EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << path;
    EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos) << path;
    EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << path;
    EXPECT_EQ(header(r, "X-Content-Type-Options"), "nosniff") << path;
  }
}

TEST(ConsoleTest, ThePageHasNoInlineScriptOrStyle) {
  const std::string page = serve_console(get("/")).body;
  for (std::size_t at = page.find("<script"); at != std::string::npos; at = page.find("<script", at + 1)) {
    const std::string tag = page.substr(at, page.find('>', at) - at);
    EXPECT_NE(tag.find("src="), std::string::npos) << tag;
  }
  EXPECT_EQ(page.find("<style"), std::string::npos);
  EXPECT_EQ(page.find("style="), std::string::npos);
  EXPECT_EQ(page.find("onclick"), std::string::npos);
}

TEST(ConsoleTest, AnUnchangedFileIsAnswered304WithItsETag) {
  const AdminResponse first = serve_console(get("/assets/app.js"));
  const std::string tag = header(first, "ETag");
  ASSERT_EQ(tag.size(), 22u);
  EXPECT_EQ(header(first, "Cache-Control"), "no-cache");
  const AdminResponse again = serve_console(get("/assets/app.js", {{"If-None-Match", tag}}));
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(header(again, "ETag"), tag);
  EXPECT_EQ(serve_console(get("/assets/app.js", {{"If-None-Match", "\"old\", W/" + tag}})).status, 304);
  EXPECT_EQ(serve_console(get("/assets/app.js", {{"If-None-Match", "\"old\""}})).status, 200);
  EXPECT_NE(header(serve_console(get("/assets/app.css")), "ETag"), tag);  // each file its own
}

TEST(ConsoleTest, AnUnknownPathIs404) {
  for (const std::string path : {"/index", "/assets/", "/assets/nope.js", "/../CMakeLists.txt", "/admin"}) {
    const AdminResponse r = serve_console(get(path));
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(header(r, "Cache-Control"), "no-store") << path;
    EXPECT_NE(r.body.find("\"reason\":\"not_found\""), std::string::npos) << path;
  }
}

TEST(ConsoleTest, TheAdminListenerServesTheConsoleBesideTheAdminApi) {
  GatewayOptions o;
  o.listen = "127.0.0.1:0";
  o.admin_listen = "127.0.0.1:0";
  o.log = [](std::string_view) {};
  auto started = Gateway::start(o, testing::load_config("upstreams: []\n"));
  ASSERT_TRUE(started.ok()) << started.error().message;
  Gateway& gw = **started;
  // Registered before the console: the longer prefix wins all the same.
  gw.add_admin_route("*", "/admin/v1/", [](const AdminRequest&) {
    return AdminResponse{200, "application/json", R"({"api":true})"};
  });
  gw.add_admin_route("GET", "/", serve_console);
  HttpClient c(gw.admin_port());

  const HttpResponse page = c.get("/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.header("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(page.header("content-security-policy").find("script-src 'self'"), std::string::npos);
  const HttpResponse script = c.get("/assets/app.js");
  EXPECT_EQ(script.status, 200);
  EXPECT_EQ(script.header("content-type"), "text/javascript; charset=utf-8");
  const HttpResponse cached = c.request("GET", "/assets/app.js", {{"If-None-Match", script.header("etag")}});
  EXPECT_EQ(cached.status, 304);
  EXPECT_TRUE(cached.body.empty());
  EXPECT_EQ(c.get("/assets/nope.js").status, 404);
  EXPECT_EQ(c.request("POST", "/", {}, "x").status, 404);  // the console answers GET only
  EXPECT_EQ(c.get("/admin/v1/whoami").body, R"({"api":true})");
  EXPECT_EQ(c.get("/healthz").status, 200);  // the listener's own routes come first
  gw.stop();
  gw.wait();
}

}  // namespace
}  // namespace sluice::gateway

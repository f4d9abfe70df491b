#include "cli/config_command.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/not_empty.h"
#include "cli/serve_control.h"
#include "cli/token_file.h"
#include "config/json.h"
#include "config/store.h"
#include "config/yaml.h"
#include "gateway/http_fetch.h"

namespace sluice::cli {
namespace {

struct ConfigOptions {
  std::string file;
  std::string db = "./sluice.db";
  std::string format;  // empty: yaml (given or not, --as-stored needs to know)
  std::string admin;
  std::string token;
  std::string token_file;
  std::string if_match;
  bool as_stored = false;
};

void fail(const ConfigOptions&, const char* what, const std::string& message) {
  std::fprintf(stderr, "sluice config %s: %s\n", what, message.c_str());
  throw CLI::RuntimeError(1);
}

// A flag's value that is not one: a usage error (exit 2), as CLI11's own.
void bad_flag(const char* what, const std::string& message) {
  std::fprintf(stderr, "sluice config %s: %s\n", what, message.c_str());
  throw CLI::RuntimeError(2);
}

// Whether a store whose password is the placeholder (REDACTED) may stand: only where a stored
// password is there for it to keep, which a primary's PUT /admin/v1/config has (apply).
enum class Placeholder : std::uint8_t { kRefused, kPrimaryDecides };

// The file, loaded and validated; on problems prints each (file:line:column: path: message) and exits 1.
std::shared_ptr<const config::Config> load_or_exit(const std::string& file, const char* what,
                                                   Placeholder placeholder = Placeholder::kRefused,
                                                   config::LoadFor purpose = {}) {
  auto loaded = config::load_yaml_file(file, purpose);
  if (auto* problems = std::get_if<std::vector<config::Problem>>(&loaded)) {
    for (const config::Problem& p : *problems) std::fprintf(stderr, "%s\n", p.to_string().c_str());
    std::fprintf(stderr, "sluice config %s: %zu problem%s in %s\n", what, problems->size(),
                 problems->size() == 1 ? "" : "s", file.c_str());
    throw CLI::RuntimeError(1);
  }
  auto cfg = std::get<std::shared_ptr<const config::Config>>(std::move(loaded));
  if (placeholder == Placeholder::kRefused && config::has_redacted_password(cfg->store)) {
    std::fprintf(stderr,
                 "%s: store: the password %s is the placeholder shown in place of the real one (to read tokens, "
                 "in /config and the console), not a password: a file must give the password itself "
                 "(sluice config export --db FILE prints it)\n"
                 "sluice config %s: 1 problem in %s\n",
                 file.c_str(), std::string(config::kRedactedPassword).c_str(), what, file.c_str());
    throw CLI::RuntimeError(1);
  }
  return cfg;
}

// As a write into a new database: what import would take.
void check(const ConfigOptions& o) {
  load_or_exit(o.file, "check", Placeholder::kRefused, {.write = true});
  std::printf("%s: ok\n", o.file.c_str());
}

void import(const ConfigOptions& o) {
  // Checked before the database is opened, so that a file with problems makes none: as a write into
  // a new database when there is none yet, else as read (and then as a write over what it holds).
  std::error_code ec;
  load_or_exit(o.file, "import", Placeholder::kRefused, {.write = !std::filesystem::exists(o.db, ec)});
  auto store = open_store_or_exit(o.db, "config import", config::StoreOptions::Access::kCreate);
  // Then as the write it is (over what the database holds), so that its problems have their lines.
  const auto current = store->load();
  const auto cfg = load_or_exit(o.file, "import", Placeholder::kRefused,
                                {.write = true, .before = current.ok() ? current->config.get() : nullptr});
  const config::WriteResult w = store->replace(cli_actor(), "config.import", *cfg);
  if (!w.ok()) {
    for (const config::Problem& p : w.refusal->problems) std::fprintf(stderr, "%s\n", p.to_string().c_str());
    fail(o, "import", w.refusal->message);
  }
  std::printf("imported %s into %s (revision %lld)\n", o.file.c_str(), o.db.c_str(),
              static_cast<long long>(w.revision));
}

void export_config(const ConfigOptions& o) {
  if (!o.format.empty() && o.format != "yaml" && o.format != "json") bad_flag("export", "--format must be yaml or json");
  // The rows as they are may hold what YAML would not read back (a value that is not JSON is kept
  // as a string, bytes that are not UTF-8 as they are): they are printed as JSON only.
  if (o.as_stored && o.format == "yaml") bad_flag("export", "--as-stored prints JSON only: leave out --format yaml");
  auto store = open_store_or_exit(o.db, "config export", config::StoreOptions::Access::kReadOnly);
  if (o.as_stored) {
    auto text = store->stored_text();
    if (!text.ok()) fail(o, "export", text.error().message);
    // As they are: a hand edit may have left bytes that are not UTF-8, which import then points at.
    boost::json::parse_options bytes_as_they_are;
    bytes_as_they_are.allow_invalid_utf8 = true;
    std::printf("%s\n", config::pretty(boost::json::parse(*text, {}, bytes_as_they_are)).c_str());
    return;
  }
  auto loaded = store->load();
  if (!loaded.ok() && loaded.error().code == ErrorCode::kInvalidArgument) {
    fail(o, "export", loaded.error().message +
                          "\nTo repair it: sluice config export --as-stored > fix.json, edit, sluice config import fix.json");
  }
  if (!loaded.ok()) fail(o, "export", loaded.error().message);
  const std::string text = o.format != "json" ? config::to_yaml(*loaded->config)
                                              : config::pretty(config::to_json(*loaded->config));
  std::fputs(text.c_str(), stdout);
}

void apply(const ConfigOptions& o) {
  // The same checks the primary makes, with the file's line numbers. A password placeholder is the
  // primary's to judge: it keeps the stored password when the address is the stored one.
  load_or_exit(o.file, "apply", Placeholder::kPrimaryDecides);
  std::string token = o.token;
  if (!o.token_file.empty()) {
    auto read = read_token_file(o.token_file);
    if (!read.ok()) bad_flag("apply", "--token-file: " + read.error().message);
    token = std::move(*read);
  }
  if (token.empty()) bad_flag("apply", "give --token or --token-file (an admin token of the primary)");
  std::ifstream in(o.file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::string admin = o.admin;
  while (!admin.empty() && admin.back() == '/') admin.pop_back();
  if (const auto url = gateway::parse_http_url(admin); !url || !url->path.empty()) {
    bad_flag("apply", "--admin must be the primary's admin URL, http://host:port (no path), got \"" + o.admin + "\"");
  }
  gateway::FetchRequest req;
  req.method = "PUT";
  req.url = admin + "/admin/v1/config";
  req.headers = {{"Authorization", "Bearer " + token}, {"Content-Type", "application/yaml"}};
  if (!o.if_match.empty()) {
    // 42, r42 or "r42" (the ETag as shown).
    std::string_view r = o.if_match;
    if (r.size() >= 2 && r.front() == '"' && r.back() == '"') r = r.substr(1, r.size() - 2);
    if (r.starts_with('r')) r.remove_prefix(1);
    if (r.empty() || !std::all_of(r.begin(), r.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      bad_flag("apply", "--if-match must be a revision like 42 (from the ETag \"r42\"), got \"" + o.if_match + "\"");
    }
    req.headers.emplace_back("If-Match", "\"r" + std::string(r) + "\"");
  }
  req.body = text.str();
  gateway::HttpFetcher fetcher;
  auto r = fetcher.send(req);
  if (!r.ok()) fail(o, "apply", r.error().message);
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(r->body, ec);
  const boost::json::object* body = !ec && v.is_object() ? &v.as_object() : nullptr;
  if (r->status == 200 && body != nullptr && body->contains("revision")) {
    std::printf("applied %s to %s (revision %s)\n", o.file.c_str(), admin.c_str(),
                boost::json::serialize(body->at("revision")).c_str());
    return;
  }
  if (body != nullptr && body->contains("problems") && body->at("problems").is_array()) {
    for (const auto& p : body->at("problems").as_array()) {
      if (!p.is_object()) continue;
      const auto& po = p.as_object();
      std::string where = o.file + ":";
      if (po.contains("line")) {
        where += boost::json::serialize(po.at("line")) + ":" + boost::json::serialize(po.at("column")) + ":";
      }
      const std::string path = po.contains("path") && po.at("path").is_string() ? std::string(po.at("path").as_string()) : "";
      const std::string message =
          po.contains("message") && po.at("message").is_string() ? std::string(po.at("message").as_string()) : "";
      std::fprintf(stderr, "%s %s%s%s\n", where.c_str(), path.c_str(), path.empty() ? "" : ": ", message.c_str());
    }
  }
  std::string msg = "the primary answered " + std::to_string(r->status);
  if (body != nullptr && body->contains("msg") && body->at("msg").is_string()) {
    msg += ": " + std::string(body->at("msg").as_string());
  }
  fail(o, "apply", msg);
}

}  // namespace

void add_config_command(CLI::App& app) {
  auto o = std::make_shared<ConfigOptions>();
  CLI::App* cmd = app.add_subcommand("config", "Move the configuration between YAML files, the database and a primary");
  cmd->require_subcommand(1);
  cmd->footer(
      "Examples:\n"
      "  sluice config check sluice.yaml                      # file:line:column: field.path: problem; exit 1\n"
      "  sluice config import sluice.yaml --db ./sluice.db    # every gateway on the database serves it within 1 s\n"
      "  sluice config export --format json > backup.json\n"
      "  sluice config apply sluice.yaml --admin http://127.0.0.1:9090 --token T --if-match 42\n"
      "A change that does not validate is refused whole: nothing of it is applied. Exit status 1 then.\n"
      "Docs: docs/configuration.md");

  CLI::App* imp = cmd->add_subcommand("import", "Replace the configuration in the database with a YAML file's "
                                                "(systems listed without credentials keep theirs)");
  imp->add_option("file", o->file, "The YAML file")->required()->check(kNotEmpty);
  imp->add_option("--db", o->db, "The database (default ./sluice.db)")->check(kNotEmpty);
  imp->callback([o] { import(*o); });

  CLI::App* exp = cmd->add_subcommand("export", "Print the database's configuration");
  exp->add_option("--format", o->format, "yaml (default) or json (--as-stored: json only)");
  exp->add_flag("--as-stored", o->as_stored,
                "Print the tables as they are, in JSON, even when they do not make a valid configuration (to "
                "repair a hand edit: edit the output, then import it)");
  exp->add_option("--db", o->db, "The database (default ./sluice.db)")->check(kNotEmpty);
  exp->callback([o] { export_config(*o); });

  CLI::App* chk = cmd->add_subcommand("check", "Check a YAML file: every problem with its line and column; "
                                               "exit 1 when there is one");
  chk->add_option("file", o->file, "The YAML file")->required()->check(kNotEmpty);
  chk->callback([o] { check(*o); });

  CLI::App* app_ = cmd->add_subcommand("apply", "Replace a running primary's configuration with a YAML file's, "
                                                "through its admin API");
  app_->add_option("file", o->file, "The YAML file")->required()->check(kNotEmpty);
  app_->add_option("--admin", o->admin, "The primary's admin listener, http://host:port")->required()->check(kNotEmpty);
  CLI::Option* token = app_->add_option("--token", o->token, "An admin token (admin role)")->check(kNotEmpty);
  app_->add_option("--token-file", o->token_file,
                   "A file whose first line is that token (kept out of the command line, which other users of "
                   "the host can read)")
      ->check(kNotEmpty)
      ->excludes(token);
  app_->add_option("--if-match", o->if_match,
                   "Only if the configuration is still at this revision (a number: the ETag \"r42\" is 42); "
                   "412 otherwise");
  app_->callback([o] { apply(*o); });
}

}  // namespace sluice::cli

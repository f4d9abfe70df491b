#include "cli/token_command.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/not_empty.h"
#include "cli/serve_control.h"
#include "config/store.h"
#include "core/duration.h"
#include "sluice/clock.h"

namespace sluice::cli {
namespace {

struct TokenOptions {
  std::string db = "./sluice.db";
  std::string role;
  std::string name;
  std::string id;
  std::optional<std::string> expires_in;  // given, even empty
};

void create(const TokenOptions& o) {
  const auto role = config::role_from_string(o.role);
  if (!role) {
    std::fprintf(stderr, "sluice token create: --role must be admin or read\n");
    throw CLI::RuntimeError(2);
  }
  Nanos lifetime{0};
  if (o.expires_in) {  // given: a lifetime in range, never "none" (0s or nothing would be forever)
    const auto d = parse_duration(*o.expires_in);
    if (!d || *d < config::kShortestTokenLifetime || *d > config::kLongestTokenLifetime) {
      std::fprintf(stderr, "sluice token create: --expires-in must be a duration from 1m to 3650d, like 90d or 12h, "
                           "got \"%s\" (leave it out for a token that lasts until revoked)\n",
                   o.expires_in->c_str());
      throw CLI::RuntimeError(2);
    }
    lifetime = *d;
  }
  if (!config::token_name_ok(o.name)) {  // before the database is opened (or made)
    std::fprintf(stderr, "sluice token create: --name: %s\n", std::string(config::kTokenNameRule).c_str());
    throw CLI::RuntimeError(2);
  }
  auto store = open_store_or_exit(o.db, "token create", config::StoreOptions::Access::kCreate);
  auto created = store->create_token(cli_actor(), *role, o.name.empty() ? o.role : o.name, lifetime);
  if (!created.ok()) {
    std::fprintf(stderr, "sluice token create: %s\n", created.error().message.c_str());
    throw CLI::RuntimeError(1);
  }
  // The token alone on stdout (for scripts); what it is on stderr.
  std::printf("%s\n", created->second.c_str());
  const std::string until =
      created->first.expires == 0 ? "" : ", expires " + config::format_time(created->first.expires);
  std::fprintf(stderr, "token %s \"%s\" (role %s%s) created in %s: it is shown this once; sluice keeps only its hash\n",
               created->first.id.c_str(), created->first.name.c_str(), config::to_string(*role), until.c_str(),
               o.db.c_str());
}

void list(const TokenOptions& o) {
  auto store = open_store_or_exit(o.db, "token list", config::StoreOptions::Access::kReadOnly);
  auto tokens = store->tokens();
  if (!tokens.ok()) {
    std::fprintf(stderr, "sluice token list: %s\n", tokens.error().message.c_str());
    throw CLI::RuntimeError(1);
  }
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(SystemClock::instance().now()).count();
  for (const config::TokenInfo& t : *tokens) {
    const std::string expiry = t.expires == 0       ? ""
                               : t.expired_at(now) ? ", expired " + config::format_time(t.expires)
                                                   : ", expires " + config::format_time(t.expires);
    std::printf("%s  %-5s  %s  %s  (created by %s%s)\n", t.id.c_str(), config::to_string(t.role),
                config::format_time(t.created).c_str(), t.name.c_str(), t.created_by.c_str(), expiry.c_str());
  }
}

void revoke(const TokenOptions& o) {
  auto store = open_store_or_exit(o.db, "token revoke", config::StoreOptions::Access::kExisting);
  auto deleted = store->delete_token(cli_actor(), o.id);
  if (!deleted.ok() || !*deleted) {
    std::fprintf(stderr, "sluice token revoke: %s\n",
                 deleted.ok() ? ("no token " + o.id).c_str() : deleted.error().message.c_str());
    throw CLI::RuntimeError(1);
  }
  std::printf("token %s revoked\n", o.id.c_str());
}

}  // namespace

void add_token_command(CLI::App& app) {
  auto o = std::make_shared<TokenOptions>();
  CLI::App* cmd = app.add_subcommand("token", "Manage the admin API's bearer tokens");
  cmd->require_subcommand(1);
  cmd->footer(
      "Examples:\n"
      "  T=$(sluice token create --role admin --name ops)     # the token alone on stdout, shown this once\n"
      "  sluice token create --role read --name grafana --expires-in 90d\n"
      "  curl -H \"Authorization: Bearer $T\" http://127.0.0.1:9090/admin/v1/whoami\n"
      "  sluice token list\n"
      "  sluice token revoke at_83ea07778e61                  # gateways on the database refuse it within 1 s\n"
      "Docs: docs/admin-api.md");

  CLI::App* c = cmd->add_subcommand("create", "Create a token and print it (once: only its hash is kept)");
  c->add_option("--role", o->role, "admin (every change) or read (read-only)")->required();
  c->add_option("--name", o->name, "What it is for, e.g. the person or the console (default: the role)");
  c->add_option("--expires-in", o->expires_in,
                "Refused from this long after now, e.g. 90d or 12h (1m to 3650d; default: until revoked)");
  c->add_option("--db", o->db, "The database (default ./sluice.db)")->check(kNotEmpty);
  c->callback([o] { create(*o); });

  CLI::App* l = cmd->add_subcommand("list", "List the tokens (never the tokens themselves)");
  l->add_option("--db", o->db, "The database (default ./sluice.db)")->check(kNotEmpty);
  l->callback([o] { list(*o); });

  CLI::App* r = cmd->add_subcommand("revoke", "Delete a token by its id");
  r->add_option("id", o->id, "The token's id (at_...; sluice token list shows them)")->required()->check(kNotEmpty);
  r->add_option("--db", o->db, "The database (default ./sluice.db)")->check(kNotEmpty);
  r->callback([o] { revoke(*o); });
}

}  // namespace sluice::cli

// COMMAND, COMMAND COUNT / LIST / INFO / DOCS / GETKEYS / HELP, from Hydra's
// command table (command_table.cpp): names, arities and key positions as
// Redis 7.0's. Each command's entry has Redis 7.0's ten fields; Hydra keeps
// no flags, ACL categories or tips, so those are empty, and its key spec
// is the one the key positions give (begin_search index, find_keys range;
// no access flags). DOCS answers each command with an empty map (no docs).
#include <fnmatch.h>

#include "server.hpp"

namespace hydra {

namespace {

using resp::lower;

void key_spec(std::string& out, const CommandSpec& c, bool resp3) {
  if (c.first <= 0) return resp::array(out, 0);
  resp::array(out, 1);
  resp::map(out, 3, resp3);
  resp::bulk(out, "flags");
  resp::set(out, 0, resp3);
  resp::bulk(out, "begin_search");
  resp::map(out, 2, resp3);
  resp::bulk(out, "type");
  resp::bulk(out, "index");
  resp::bulk(out, "spec");
  resp::map(out, 1, resp3);
  resp::bulk(out, "index");
  resp::integer(out, c.first);
  resp::bulk(out, "find_keys");
  resp::map(out, 2, resp3);
  resp::bulk(out, "type");
  resp::bulk(out, "range");
  resp::bulk(out, "spec");
  resp::map(out, 3, resp3);
  resp::bulk(out, "lastkey");
  resp::integer(out, c.last < 0 ? c.last : c.last - c.first);
  resp::bulk(out, "keystep");
  resp::integer(out, c.step);
  resp::bulk(out, "limit");
  resp::integer(out, 0);
}

void info(std::string& out, const CommandSpec& c, bool resp3) {
  resp::array(out, 10);
  resp::bulk(out, c.name);
  resp::integer(out, c.arity);
  resp::set(out, 0, resp3);  // flags
  resp::integer(out, c.first);
  resp::integer(out, c.last);
  resp::integer(out, c.step);
  resp::set(out, 0, resp3);  // ACL categories
  resp::array(out, 0);       // tips
  key_spec(out, c, resp3);
  resp::array(out, 0);       // subcommands
}

}  // namespace

void command_command(Pending& p, const std::vector<std::string_view>& args) {
  const auto table = all_commands();
  if (args.size() == 1) {
    resp::array(p.reply, table.size());
    for (const auto& c : table) info(p.reply, c, p.resp3);
    return;
  }
  const std::string sub = lower(args[1]);
  auto wrong = [&] { resp::error(p.reply, "ERR wrong number of arguments for 'command|" + sub + "' command"); };
  if (sub == "count") {
    if (args.size() != 2) return wrong();
    return resp::integer(p.reply, std::int64_t(table.size()));
  }
  if (sub == "list") {  // [FILTERBY MODULE m | ACLCAT c | PATTERN p]
    std::string pattern = "*";
    bool none = false;
    if (args.size() == 5 && lower(args[2]) == "filterby") {
      const std::string by = lower(args[3]);
      if (by == "pattern") pattern = lower(args[4]);
      else if (by == "module" || by == "aclcat") none = true;  // no modules; no ACL categories kept
      else return resp::error(p.reply, "ERR syntax error");
    } else if (args.size() != 2) {
      return resp::error(p.reply, "ERR syntax error");
    }
    std::vector<std::string_view> names;
    for (const auto& c : table)
      if (!none && ::fnmatch(pattern.c_str(), std::string(c.name).c_str(), 0) == 0) names.push_back(c.name);
    resp::array(p.reply, names.size());
    for (auto n : names) resp::bulk(p.reply, n);
    return;
  }
  if (sub == "info" || sub == "docs") {
    std::vector<const CommandSpec*> chosen;
    if (args.size() == 2) {
      for (const auto& c : table) chosen.push_back(&c);
    } else {
      for (std::size_t i = 2; i < args.size(); ++i) {
        const CommandSpec* c = find_command(lower(args[i]));
        if (c || sub == "info") chosen.push_back(c);  // DOCS leaves unknown names out, INFO answers nil
      }
    }
    if (sub == "info") {
      resp::array(p.reply, chosen.size());
      for (const CommandSpec* c : chosen) {
        if (c) info(p.reply, *c, p.resp3);
        else resp::nil(p.reply, p.resp3);
      }
      return;
    }
    resp::map(p.reply, chosen.size(), p.resp3);
    for (const CommandSpec* c : chosen) {
      resp::bulk(p.reply, c->name);
      resp::map(p.reply, 0, p.resp3);
    }
    return;
  }
  if (sub == "getkeys") {
    if (args.size() < 4) return wrong();  // Redis 7.0's arity: -4
    const CommandSpec* c = find_command(lower(args[2]));
    if (!c) return resp::error(p.reply, "ERR Invalid command specified");
    const std::size_t n = args.size() - 2;  // the command's arguments with its name
    if (!arity_ok(*c, n)) return resp::error(p.reply, "ERR Invalid number of arguments specified for command");
    if (c->first <= 0 || std::size_t(c->first) >= n) return resp::error(p.reply, "ERR The command has no key arguments");
    const std::size_t last = c->last < 0 ? n - 1 : std::min<std::size_t>(std::size_t(c->last), n - 1);
    std::vector<std::string_view> keys;
    for (std::size_t i = std::size_t(c->first); i <= last; i += std::size_t(c->step)) keys.push_back(args[2 + i]);
    resp::array(p.reply, keys.size());
    for (auto k : keys) resp::bulk(p.reply, k);
    return;
  }
  if (sub == "help" && args.size() == 2)
    return help_reply(p.reply, {"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                                "(no subcommand)", "    Return details about all commands Hydra has.",
                                "COUNT", "    Return the total number of commands.",
                                "LIST [FILTERBY (MODULE <name>|ACLCAT <category>|PATTERN <pattern>)]",
                                "    Return the command names.",
                                "INFO [<command-name> ...]", "    Return details about the commands (no flags or categories).",
                                "DOCS [<command-name> ...]", "    Return an empty document for each command.",
                                "GETKEYS <full-command>", "    Return the keys from a full command.",
                                "HELP", "    Print this help."});
  resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try COMMAND HELP.");
}

}  // namespace hydra

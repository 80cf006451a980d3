// The command table's view for the I/O loop: a command's arity and key
// positions (transactions.cpp, command_table.cpp), the names of the
// command families that take their own paths, and a few reply helpers.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "resp.hpp"

namespace hydra {

struct Pending;  // server.hpp

// A command's arity and keys, as Redis's command table (transactions.cpp):
// what MULTI checks before queuing, and the shards a command touches.
struct CommandSpec {
  std::string_view name;
  int arity;              // n: exactly n arguments with the name; -n: at least n
  int first, last, step;  // key positions; first 0: none; last -1: to the end
  bool all_shards;        // DBSIZE, FLUSHALL, INFO: every shard
};
const CommandSpec* find_command(std::string_view lower_name);
// A command's place in the table (INFO commandstats' counters), -1 for a
// name it does not have; GET and SET inline, without a lookup.
int command_index_lookup(std::string_view lower_name);
inline int command_index(std::string_view n) {
  if (n.size() == 3 && n[1] == 'e' && n[2] == 't') {
    if (n[0] == 'g') return 0;
    if (n[0] == 's') return 1;
  }
  return command_index_lookup(n);
}
std::span<const CommandSpec> all_commands();  // the table, in its order
// COMMAND [COUNT|LIST|INFO|DOCS|GETKEYS|HELP] (command_info.cpp).
void command_command(Pending& p, const std::vector<std::string_view>& args);
bool transaction_name(const std::string& lower_name);  // Loop::transaction_command handles it
bool arity_ok(const CommandSpec& spec, std::size_t args);  // args: with the name
// Commands whose steps read one shard and write another (or gather
// several): always a transaction, and EXEC waits for each before the next.
bool always_transaction(const std::string& lower_name);
// ZUNIONSTORE, ZUNION, ZINTERCARD, ZMPOP, ZRANGESTORE...: sorted-set commands over several keys (and SINTERCARD).
bool zset_multi_name(std::string_view lower_name);
// SORT's options that read other keys (BY/GET patterns with '*'): it then claims every shard (sort.cpp).
bool sort_reads_patterns(const std::vector<std::string_view>& args);
// BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, LMPOP (blocking.cpp).
bool blocking_name(const std::string& lower_name);
// A HELP subcommand's reply: its lines as simple strings.
inline void help_reply(std::string& out, std::initializer_list<const char*> lines) {
  resp::array(out, lines.size());
  for (const char* l : lines) resp::simple(out, l);
}
// LCS's reply from the two values and the command's arguments (lcs.cpp).
void lcs_reply(std::string& out, bool resp3, const std::string& a, const std::string& b,
               const std::vector<std::string_view>& args);
// CONFIG GET/SET/RESETSTAT/REWRITE/HELP (config.cpp).
void config_command(Pending& p, const std::vector<std::string_view>& args);
// Redis 7's unknown-command error, arguments quoted up to 128 bytes in all.
std::string unknown_command(const std::vector<std::string_view>& args);

}  // namespace hydra

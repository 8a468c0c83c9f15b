// abx snapshot list|rm (abx sandbox snapshot takes one; abx sandbox create <snapshot id> starts
// a sandbox from it).
#include <boost/json.hpp>
#include <iostream>

#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

json::object snapshot_json(const client::SnapshotInfo& s) {
  json::array names;
  for (const auto& n : s.names) names.emplace_back(n);
  json::object o{{"snapshotID", s.id}, {"names", std::move(names)}};
  if (!s.sandbox_id.empty()) o["sandboxID"] = s.sandbox_id;
  if (!s.template_id.empty()) o["templateID"] = s.template_id;
  if (!s.created_at.empty()) o["createdAt"] = s.created_at;
  return o;
}

namespace {

struct SnapshotOpts {
  std::string sandbox, name;
  std::vector<std::string> ids;
};

int list(Context& ctx, const SnapshotOpts& o) {
  auto l = client::Sandbox::list_snapshots(ctx.config(), o.sandbox, o.name);
  if (!l.ok()) return ctx.fail(l.error());
  if (ctx.flags.json) {
    json::array a;
    for (const auto& s : *l) a.push_back(snapshot_json(s));
    ctx.print_json(a);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : *l) {
    std::string names;
    for (const auto& n : s.names) names += (names.empty() ? "" : ",") + n;
    rows.push_back({s.id, names, s.sandbox_id, s.template_id, s.created_at});
  }
  print_table({"ID", "NAMES", "SANDBOX", "TEMPLATE", "CREATED"}, rows);
  return kExitOk;
}

int remove(Context& ctx, const SnapshotOpts& o) {
  const auto cfg = ctx.config();
  return remove_each(
      ctx, o.ids, "snapshot", "removed snapshot", "removed",
      [&](const std::string& id) { return client::Sandbox::delete_snapshot(id, cfg); });
}

void fill_snapshot(CLI::App* sn, Context& ctx) {
  sn->require_subcommand(1);
  auto o = std::make_shared<SnapshotOpts>();

  auto* l = sn->add_subcommand("list", "List snapshots, newest first");
  l->alias("ls");
  l->add_option("--sandbox", o->sandbox, "Only those taken from this sandbox");
  l->add_option("--name", o->name, "Only those with this name");
  l->callback([&ctx, o] { ctx.exit_code = list(ctx, *o); });

  auto* rm = sn->add_subcommand("rm", "Delete snapshots");
  rm->alias("remove");
  rm->add_option("snapshot", o->ids, "Snapshot ids (snapshot-…)")->required();
  rm->callback([&ctx, o] { ctx.exit_code = remove(ctx, *o); });
}

}  // namespace

const TopCommand kSnapshotCommand{
    "snapshot", "snapshots",
    "List and remove sandbox snapshots (take one with `abx sandbox snapshot`, start one with "
    "`abx sandbox create <snapshot id>`)",
    fill_snapshot};

}  // namespace abx::cli

#!/usr/bin/env bash
# Issue 18 findings 5 and 12 on a 2-host rack in a box whose sockets are
# open to a group (up --socket-group: dataplane.socket_group and
# controlplane.socket_group), with test users made here and removed after:
# - `gossamerctl run` by a non-root member of the group starts the instance
#   on every host as that user (uid, gid, supplementary groups), not as
#   gossamerd's root; root's runs still run as root;
# - a user that host 1 does not know (host 1's namespace has its own
#   /etc/passwd, /etc/netns/NS/passwd) is refused there, naming the host;
# - no instance without its run's token can attach to a gossamerd run: not
#   another user's, not the same user's, not with host 0's token; each is
#   denied (apps_denied), and the real run then finishes;
# - a second uid cannot join a run another uid started by hand, and the
#   owner's own instance can.
#   rack_privilege.sh BUILD_DIR
# Needs root, network namespaces, useradd and runuser; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/rack_app"
skip_unless_rack "$app"
for t in useradd userdel groupadd groupdel runuser; do
  command -v "$t" >/dev/null || { echo "SKIP: needs $t"; exit 77; }
done
own_rack rp priv
cd /

# Users and groups of this test alone (names of at most 32 characters).
tag=$(( $$ % 1000000 ))
grp="gsm-g$tag" extra="gsm-x$tag" alice="gsm-a$tag" bob="gsm-b$tag" carol="gsm-c$tag"
ns1="${GOSSAMER_RACK_PREFIX}-h1"
bg=""
cleanup() {
  [ -n "$bg" ] && kill "$bg" 2>/dev/null
  [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true
  for u in "$alice" "$bob" "$carol"; do userdel "$u" >/dev/null 2>&1; done
  for g in "$grp" "$extra"; do groupdel "$g" >/dev/null 2>&1; done
  rm -rf "/etc/netns/$ns1" "$GOSSAMER_RACK_DIR.out"
}
trap cleanup EXIT
out="$GOSSAMER_RACK_DIR.out"
mkdir -p "$out"
chmod 755 "$out"

groupadd "$grp" && groupadd "$extra" || { echo "FAIL: groupadd"; exit 1; }
useradd -M -N -g "$grp" -G "$extra" -s /bin/sh "$alice" &&
  useradd -M -N -g "$grp" -s /bin/sh "$bob" &&
  useradd -M -N -g "$grp" -s /bin/sh "$carol" || { echo "FAIL: useradd"; exit 1; }
uid_a=$(id -u "$alice") uid_b=$(id -u "$bob")
# Host 1 knows alice and bob, not carol.
mkdir -p "/etc/netns/$ns1"
grep -v "^$carol:" /etc/passwd >"/etc/netns/$ns1/passwd"
chmod 644 "/etc/netns/$ns1/passwd"

"$rib" up --hosts 2 --socket-group "$grp" >"$out/up" 2>&1 || { cat "$out/up"; echo "FAIL: rack up"; exit 1; }
# The users read the configs (GOSSAMER_CONFIG) in the rack's directory.
chmod 755 "$GOSSAMER_RACK_DIR" "$GOSSAMER_RACK_DIR"/h*/
chmod 644 "$GOSSAMER_RACK_DIR"/h*.yaml

as() { local h=$1 u=$2; shift 2; "$rib" exec "$h" -- runuser -u "$u" -- "$@"; }
stat_now() { sleep 1.2; stat_of "$@"; }  # the stats files are rewritten every second

# ---- instances run as the user who asked, on every host ------------------------------------
as 0 "$alice" timeout 60 "$ctl" run -- /usr/bin/id >"$out/id" 2>"$out/id.err"
rc=$?
want=$(id "$alice")
if [ $rc -eq 0 ] && grep -qxF "[host 0] $want" "$out/id" && grep -qxF "[host 1] $want" "$out/id"; then
  pass "gossamerctl run by $alice (uid $uid_a, not root): every host's instance runs as '$want'"
else
  fail "gossamerctl run by $alice: exit $rc, want '$want' from both hosts"; cat "$out/id" "$out/id.err"
fi
"$rib" exec 0 -- timeout 60 "$ctl" run -- /usr/bin/id -u >"$out/root" 2>&1
if [ "$(sort "$out/root")" = "$(printf '[host 0] 0\n[host 1] 0')" ]; then
  pass "root's run runs as root on every host"
else
  fail "root's run: $(cat "$out/root")"
fi

# ---- a user that host 1 does not have ------------------------------------------------------
as 0 "$carol" timeout 60 "$ctl" run -- /usr/bin/id >"$out/carol" 2>"$out/carol.err"
rc=$?
if [ $rc -eq 2 ] && grep -q "host 1 (h1): user '$carol' does not exist on this host" "$out/carol.err" &&
   ! grep -q "^\[host" "$out/carol"; then
  pass "a user host 1 lacks is refused before anything starts: $(tail -1 "$out/carol.err")"
else
  fail "$carol's run: exit $rc"; cat "$out/carol" "$out/carol.err"
fi

# ---- only the run's own instances attach to a gossamerd run --------------------------------
d0=$(stat_now 1 apps_denied)
# The real instances wait 4 s before they attach: the intruders come first.
as 0 "$alice" timeout 90 "$ctl" run -- /bin/sh -c "sleep 4; exec $app 4 50" >"$out/tok" 2>"$out/tok.err" &
bg=$!
id="" pid0=""
for _ in $(seq 50); do
  read -r id pid0 < <("$rib" exec 0 -- "$ctl" status | awk '$2 == "running" && $NF == "/bin/sh" { print $1, $5 }')
  [ -n "$id" ] && break
  sleep 0.1
done
token0=$(tr '\0' '\n' <"/proc/$pid0/environ" 2>/dev/null | sed -n 's/^GOSSAMER_RUN_TOKEN=//p')
intrude() {  # LABEL USER [VAR=VALUE...]: an instance of run $id on host 1, refused
  local label=$1 u=$2
  shift 2
  as 1 "$u" env GOSSAMER_RUN_ID="$id" GOSSAMER_START_TIMEOUT=3 "$@" timeout 20 "$app" 4 50 >"$out/intr.$label" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && grep -q "the dataplane refused the attach: .*$id" "$out/intr.$label"; then
    pass "$label is denied: $(grep -o 'refused the attach: .*' "$out/intr.$label" | head -1)"
  else
    fail "$label: exit $rc"; tail -n 3 "$out/intr.$label"
  fi
}
[ -n "$token0" ] || fail "no GOSSAMER_RUN_TOKEN in the environment of host 0's instance (pid '$pid0')"
if [ -z "$id" ]; then
  fail "no gossamerd run found"
else
  intrude "$bob without a token" "$bob"
  intrude "$alice (the run's own user) without a token" "$alice"
  intrude "$bob with host 0's token" "$bob" GOSSAMER_RUN_TOKEN="$token0"
  intrude "root with a made-up token" root GOSSAMER_RUN_TOKEN="$(printf '%064d' 7)"
fi
wait "$bg"
rc=$?
bg=""
if [ $rc -eq 0 ] && [ "$(grep -c '^\[host [01]\] run returned 0' "$out/tok")" -eq 2 ]; then
  pass "the run's real instances attached after the intruders and finished"
else
  fail "the gossamerd run: exit $rc"; tail -n 5 "$out/tok" "$out/tok.err"
fi
denied=$(( $(stat_now 1 apps_denied) - d0 ))
[ "$denied" -eq 4 ] && pass "host 1 counted 4 denied attaches (apps_denied)" ||
  fail "host 1 counted $denied denied attaches, expected 4"

# ---- a run started by hand belongs to the uid of its first instance ------------------------
d0=$(stat_now 1 apps_denied)
hand="hand-$$"
as 0 "$alice" env GOSSAMER_RUN_ID="$hand" timeout 60 "$app" 4 50 >"$out/hand.0" 2>&1 &
bg=$!
sleep 1.5  # attached on host 0, announced to host 1
as 1 "$bob" env GOSSAMER_RUN_ID="$hand" GOSSAMER_START_TIMEOUT=3 timeout 20 "$app" 4 50 >"$out/hand.bob" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "belongs to uid $uid_a.*uid $uid_b may not join it" "$out/hand.bob"; then
  pass "$bob cannot join $alice's hand-started run: $(grep -o 'refused the attach: .*' "$out/hand.bob" | head -1)"
else
  fail "$bob joined $alice's hand-started run (exit $rc)"; tail -n 3 "$out/hand.bob"
fi
as 1 "$alice" env GOSSAMER_RUN_ID="$hand" timeout 60 "$app" 4 50 >"$out/hand.1" 2>&1
rc1=$?
wait "$bg"
rc0=$?
bg=""
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q "run returned 0" "$out/hand.1"; then
  pass "$alice's own instance on host 1 joined her run, which finished"
else
  fail "$alice's hand-started run: host 0 exit $rc0, host 1 exit $rc1"; tail -n 3 "$out/hand.0" "$out/hand.1"
fi
denied=$(( $(stat_now 1 apps_denied) - d0 ))
[ "$denied" -eq 1 ] && pass "host 1 counted the denial" || fail "host 1 counted $denied denials, expected 1"

if [ $failures -eq 0 ]; then echo "rack privilege: all checks passed"; exit 0; fi
echo "rack privilege: $failures check(s) failed"; exit 1

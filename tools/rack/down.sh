# shellcheck shell=bash
# Rack in a box: the `down` command, and stopping what a rack left behind.
# Sourced by tools/rack-in-a-box (no behaviour of its own); it uses the
# globals set there (prog, repo, STATE, PREFIX and the limits).

# Stops this rack's gossamerds and dataplanes still running in namespace NS
# (host I), e.g. when their pid files are gone.
stop_leftovers() {
  local ns=$1 i=$2 p
  local -a gs=() ds=()
  for p in $(ip netns pids "$ns" 2>/dev/null || true); do
    if is_ours "$p" "$i" gossamerd; then gs+=("$p")
    elif is_ours "$p" "$i" gossamer-dataplane; then ds+=("$p"); fi
  done
  [ ${#gs[@]} -eq 0 ] || { warn "host $i: stopping gossamerd left in $ns (pid ${gs[*]})"; terminate "gossamerd left in $ns" "$GD_STOP_TIMEOUT" "${gs[@]}"; }
  ds=()
  for p in $(ip netns pids "$ns" 2>/dev/null || true); do
    if is_ours "$p" "$i" gossamer-dataplane; then ds+=("$p"); fi
  done
  [ ${#ds[@]} -eq 0 ] || { warn "host $i: stopping dataplane left in $ns (pid ${ds[*]})"; terminate "dataplane left in $ns" "$DP_STOP_TIMEOUT" "${ds[@]}"; }
}

cmd_down() {
  require_root down
  need_tool ip iproute2
  local n=0 i ns pids
  if [ -f "$STATE/hosts" ]; then
    load_state
    n=$NHOSTS
    # gossamerds first: each stops its applications and its dataplane.
    local -a all=()
    for ((i = 0; i < n; i++)); do all+=("$i"); done
    gd_stop "${all[@]}" || true
    for ((i = 0; i < n; i++)); do
      dp_stop "$i" || true
    done
  fi
  local -a victims=()
  for ((i = 0; i < n; i++)); do victims+=("$(host_ns "$i")"); done
  # Leftovers of a crashed run with this prefix.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    if [ "$ns" = "$(sw_ns)" ] || [[ $ns =~ ^$PREFIX-h[0-9]+$ ]]; then victims+=("$ns"); fi
  done
  victims+=("$(sw_ns)")
  local -A done_ns=()
  for ns in "${victims[@]}"; do
    [ -z "${done_ns[$ns]:-}" ] || continue
    done_ns[$ns]=1
    ns_exists "$ns" || continue
    if [[ $ns =~ ^$PREFIX-h([0-9]+)$ ]]; then stop_leftovers "$ns" "${BASH_REMATCH[1]}"; fi
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)
    [ -z "$pids" ] || warn "note: processes still run in $ns (pids $pids); not ours to kill, they keep the namespace alive"
    ip netns del "$ns" 2>/dev/null || warn "could not delete namespace $ns"
  done
  if [ -d "$STATE" ]; then
    if [ -f "$STATE/prefix" ] || [ -f "$STATE/hosts" ] || [ -z "$(ls -A "$STATE")" ]; then
      rm -rf -- "$STATE"
    else
      warn "$STATE does not look like a rack state directory; not removing it"
    fi
  fi
  note "rack down"
}

#!/usr/bin/env bash
# cluster.sh — a cluster of N hosts on this machine, for Open MPI jobs: each host is a Linux
# network namespace with its own address and, for the ranks launched there, its own hostname; the
# hosts are joined by veth pairs on a bridge that lives in a namespace of its own, and every host's
# link is shaped by tc. Nothing outside the namespaces made here is touched.
#
#   cluster.sh up [--hosts N] [--link RATE] [--delay TIME] [--prefix P]
#   cluster.sh run [--np N] [--ppn K] [--prefix P] -- PROGRAM ARGS...   (mpirun -np N added)
#   cluster.sh run [--prefix P] -- mpirun MPIRUN-ARGS...                  (the hosts' args added)
#   cluster.sh status [--prefix P]
#   cluster.sh down [--prefix P]
#
# up: hosts PREFIXh0..PREFIXh<N-1> (default prefix "zero-", N = 2) at 10.231.0.1, .2, ... /24
#     on eth0, loopback up; the bridge br0 in namespace PREFIXbr. --link RATE (tc units: 1gbit,
#     100mbit, ...) limits each host's outgoing traffic with a token bucket (tbf), so every
#     transfer between two hosts runs at RATE; traffic inside a host (loopback, shared memory) is
#     not shaped. --delay TIME (e.g. 0.2ms, each direction) needs the kernel's netem qdisc.
#     `up` on a prefix that is already up takes the old cluster down first.
# run: mpirun starts in host 0 (hostname PREFIXh0) with a hostfile of the hosts' addresses,
#     K slots each (--ppn, default ceil(N / hosts)), so ranks fill host 0 first, then host 1, ...
#     Its rsh launcher is an agent made by `up` that enters the target host's namespace (instead
#     of ssh) and gives its daemon the host's hostname; TCP between hosts restricted to the
#     cluster subnet (btl tcp,self,vader; oob over the same subnet), shared memory inside a host.
#     The exit status is mpirun's.
# status: the hosts, their addresses and the shaping in place (exit 1 when the cluster is not up).
# down: kills what still runs in the namespaces of this prefix and deletes them (found by name,
#     so it also cleans up after a crash; idempotent).
#
# Needs root (CAP_NET_ADMIN), iproute2 (ip, tc), util-linux (unshare) and Open MPI. Where network
# namespaces cannot be made, `up` prints one line saying why and exits 77.
set -euo pipefail

die() { echo "cluster: $*" >&2; exit 1; }
skip() { echo "cluster: SKIP: $*" >&2; exit 77; }

prefix=${ZERO_CLUSTER_PREFIX:-zero-}
subnet_base=10.231.0
state_root=${ZERO_CLUSTER_STATE:-/run/zero-cluster}

usage() {
  sed -n '/^#   cluster.sh/p' "$0" | sed 's/^# *//' >&2
  exit 2
}

# ---- helpers -----------------------------------------------------------------------------------
state_dir() { echo "$state_root/${prefix%-}"; }

host_ns() { echo "${prefix}h$1"; }
bridge_ns() { echo "${prefix}br"; }
host_addr() { echo "$subnet_base.$(($1 + 1))"; }

# Namespaces of this prefix that exist now: PREFIXh<digits> and PREFIXbr.
our_namespaces() {
  local esc
  esc=$(printf '%s' "$prefix" | sed 's/[][\.*^$/]/\\&/g')
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${esc}(h[0-9]+|br)\$" || true
}

check_prefix() {
  [[ $prefix =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,15}$ ]] ||
    die "--prefix '$prefix': expected 1-16 letters, digits, '_', '.', '-' (starting with a letter or digit)"
}

# ---- down --------------------------------------------------------------------------------------
cmd_down() {
  local ns pids found=0
  command -v ip >/dev/null 2>&1 || return 0
  for ns in $(our_namespaces); do
    found=1
    # Processes still running in the namespace (a crashed job's mpirun, daemons, ranks).
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    fi
  done
  for ns in $(our_namespaces); do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      ip netns del "$ns" 2>/dev/null && break
      sleep 0.1
    done
  done
  rm -rf "$(state_dir)"
  if [ -n "$(our_namespaces)" ]; then
    die "down: could not delete namespaces: $(our_namespaces | tr '\n' ' ')"
  fi
  [ "$found" = 1 ] && echo "cluster: down (prefix $prefix)" >&2
  return 0
}

# ---- up ----------------------------------------------------------------------------------------
# tbf burst: at least 64 KiB (one GSO packet) and 4 ms of traffic at the rate.
tbf_burst() {
  local rate=$1 bits
  bits=$(tc_rate_bits "$rate") || return 1
  local b=$((bits / 8 / 250))
  ((b < 65536)) && b=65536
  echo "$b"
}

# tc rate string -> bits per second (tc's units: bit, kbit, mbit, gbit, tbit, bps, kbps, ...).
tc_rate_bits() {
  local r=${1,,} num unit
  [[ $r =~ ^([0-9]+)([a-z]*)$ ]] || return 1
  num=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2]}
  case $unit in
  "" | bit) echo "$num" ;;
  kbit) echo $((num * 1000)) ;;
  mbit) echo $((num * 1000000)) ;;
  gbit) echo $((num * 1000000000)) ;;
  bps) echo $((num * 8)) ;;
  kbps) echo $((num * 8000)) ;;
  mbps) echo $((num * 8000000)) ;;
  gbps) echo $((num * 8000000000)) ;;
  *) return 1 ;;
  esac
}

cmd_up() {
  local hosts=2 link="" delay=""
  while (($#)); do
    case $1 in
    --hosts) hosts=${2:-}; shift 2 || usage ;;
    --link) link=${2:-}; shift 2 || usage ;;
    --delay) delay=${2:-}; shift 2 || usage ;;
    *) die "up: unknown argument '$1' (expected --hosts N, --link RATE, --delay TIME)" ;;
    esac
  done
  [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 200)) ||
    die "up: --hosts '$hosts': expected an integer from 1 to 200"
  if [ -n "$link" ]; then
    tc_rate_bits "$link" >/dev/null && (($(tc_rate_bits "$link") > 0)) ||
      die "up: --link '$link': expected a positive rate such as 1gbit, 100mbit, 500kbit"
  fi
  if [ -n "$delay" ]; then
    [[ ${delay,,} =~ ^[0-9]+(\.[0-9]+)?(s|ms|us)$ ]] ||
      die "up: --delay '$delay': expected a time such as 0.2ms, 50us, 1ms"
  fi

  command -v ip >/dev/null 2>&1 || skip "no 'ip' command (install iproute2): cannot make network namespaces"
  command -v tc >/dev/null 2>&1 || skip "no 'tc' command (install iproute2): cannot shape links"
  command -v unshare >/dev/null 2>&1 || skip "no 'unshare' command (util-linux): cannot give hosts their hostnames"
  local probe="${prefix}probe$$" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    skip "cannot create a network namespace ($(echo "$err" | head -1); needs root with CAP_NET_ADMIN)"
  fi
  ip netns del "$probe" 2>/dev/null || true

  cmd_down
  local dir br
  dir=$(state_dir)
  br=$(bridge_ns)
  mkdir -p "$dir"
  trap 'echo "cluster: up failed; removing what it made" >&2; cmd_down' ERR

  ip netns add "$br"
  ip -n "$br" link set lo up
  ip -n "$br" link add name br0 type bridge
  ip -n "$br" link set br0 up
  local i ns addr
  for ((i = 0; i < hosts; i++)); do
    ns=$(host_ns "$i")
    addr=$(host_addr "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # The pair is made inside the bridge's namespace and its far end moved straight into the
    # host's: no interface ever appears in the namespace this script runs in.
    ip -n "$br" link add name "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$br" link set "p$i" master br0
    ip -n "$br" link set "p$i" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ -n "$delay" ] && [ -n "$link" ]; then
      if ! err=$(ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$delay" 2>&1); then
        trap - ERR
        cmd_down
        skip "--delay needs the kernel's netem qdisc (sch_netem): $err"
      fi
      ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "$link" \
        burst "$(tbf_burst "$link")" latency 100ms
    elif [ -n "$delay" ]; then
      if ! err=$(ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$delay" 2>&1); then
        trap - ERR
        cmd_down
        skip "--delay needs the kernel's netem qdisc (sch_netem): $err"
      fi
    elif [ -n "$link" ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$link" \
        burst "$(tbf_burst "$link")" latency 100ms
    fi
    echo "$addr $ns" >>"$dir/hosts"
  done

  # The rsh agent: Open MPI calls it as `agent HOST COMMAND...` (like ssh). It enters HOST's
  # namespace, takes a UTS namespace of its own named after the host (Open MPI tells nodes apart
  # by hostname), and runs the command through bash as ssh would.
  cat >"$dir/agent" <<EOF
#!/usr/bin/env bash
# rsh agent of the cluster '${prefix}' (made by cluster.sh up)
set -eu
target=\$1; shift
ns=""
while read -r a n; do
  if [ "\$target" = "\$a" ] || [ "\$target" = "\$n" ]; then ns=\$n; fi
done <"$dir/hosts"
[ -n "\$ns" ] || { echo "cluster agent: '\$target' is not a host of the cluster '${prefix}'" >&2; exit 255; }
exec ip netns exec "\$ns" unshare --uts -- bash -c 'hostname "\$0" && eval "\$1"' "\$ns" "\$*"
EOF
  chmod 755 "$dir/agent"
  cat >"$dir/config" <<EOF
hosts=$hosts
link=${link:-none}
delay=${delay:-none}
EOF
  trap - ERR
  echo "cluster: up: $hosts hosts ($(host_ns 0)..$(host_ns $((hosts - 1))), $subnet_base.1-$((hosts))/24), link ${link:-unshaped}${delay:+, delay $delay}" >&2
}

# ---- run ---------------------------------------------------------------------------------------
cmd_run() {
  local np="" ppn=""
  while (($#)); do
    case $1 in
    --np) np=${2:-}; shift 2 || usage ;;
    --ppn) ppn=${2:-}; shift 2 || usage ;;
    --) shift; break ;;
    *) die "run: unknown argument '$1' (expected --np N, --ppn K, then -- and the command)" ;;
    esac
  done
  (($#)) || die "run: no command after --"
  local dir hosts
  dir=$(state_dir)
  [ -f "$dir/config" ] && [ -n "$(our_namespaces)" ] ||
    die "run: the cluster '$prefix' is not up (cluster.sh up first)"
  hosts=$(sed -n 's/^hosts=//p' "$dir/config")
  [ -z "$np" ] || [[ $np =~ ^[1-9][0-9]*$ ]] || die "run: --np '$np': expected a positive integer"
  [ -z "$ppn" ] || [[ $ppn =~ ^[1-9][0-9]*$ ]] || die "run: --ppn '$ppn': expected a positive integer"
  local is_mpirun=0 i a
  case $(basename "$1") in mpirun | mpiexec | orterun) is_mpirun=1 ;; esac
  if ((is_mpirun)); then
    [ -z "$np" ] || die "run: give -np to mpirun itself when the command is mpirun"
    # mpirun's own -np / -n / --np sizes the hostfile's slots.
    local argv=("$@")
    for ((i = 1; i < ${#argv[@]}; i++)); do
      a=${argv[i]}
      case $a in
      -np | -n | --np | --n) np=${argv[i + 1]:-} ;;
      -np=* | --np=* | -n=* | --n=*) np=${a#*=} ;;
      esac
    done
    [ -z "$np" ] || [[ $np =~ ^[1-9][0-9]*$ ]] || die "run: mpirun's -np '$np': expected a positive integer"
  fi
  if [ -z "$ppn" ]; then
    if [ -n "$np" ]; then ppn=$(((np + hosts - 1) / hosts)); else ppn=1; fi
  fi
  if [ -n "$np" ] && ((np > ppn * hosts)); then
    die "run: --np $np does not fit $hosts hosts x $ppn slots (--ppn $ppn)"
  fi
  local hostfile="$dir/hostfile.$$"
  awk -v k="$ppn" '{print $1 " slots=" k}' "$dir/hosts" >"$hostfile"

  local mpi_args=(--hostfile "$hostfile"
    --mca plm_rsh_agent "$dir/agent"
    --mca plm_rsh_no_tree_spawn 1
    --mca btl tcp,self,vader
    --mca btl_tcp_if_include "$subnet_base.0/24"
    --mca oob_tcp_if_include "$subnet_base.0/24")
  local cmd
  if ((is_mpirun)); then
    cmd=("$1" "${mpi_args[@]}" "${@:2}")
  else
    [ -n "$np" ] || np=$((ppn * hosts))
    cmd=(mpirun -np "$np" "${mpi_args[@]}" "$@")
  fi
  local rc=0
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    ip netns exec "$(host_ns 0)" unshare --uts -- \
    bash -c 'hostname "$0" && exec "$@"' "$(host_ns 0)" "${cmd[@]}" || rc=$?
  rm -f "$hostfile"
  return "$rc"
}

# ---- status ------------------------------------------------------------------------------------
cmd_status() {
  local dir ns
  dir=$(state_dir)
  if [ -z "$(our_namespaces)" ]; then
    echo "cluster: '$prefix' is not up"
    return 1
  fi
  [ -f "$dir/config" ] && sed 's/^/  /' "$dir/config"
  for ns in $(our_namespaces); do
    echo "$ns:"
    ip -n "$ns" -brief addr show 2>/dev/null | sed 's/^/  /'
    ip netns exec "$ns" tc qdisc show 2>/dev/null | grep -v 'noqueue' | sed 's/^/  /' || true
  done
}

# ---- main --------------------------------------------------------------------------------------
(($#)) || usage
sub=$1
shift
args=()
while (($#)); do
  case $1 in
  --prefix) prefix=${2:-}; shift 2 || usage ;;
  --) args+=("$@"); break ;;
  *) args+=("$1"); shift ;;
  esac
done
check_prefix
case $sub in
up) cmd_up "${args[@]}" ;;
down) cmd_down ;;
run) cmd_run "${args[@]}" ;;
status) cmd_status ;;
-h | --help | help) usage ;;
*) die "unknown command '$sub' (expected up, down, run or status)" ;;
esac

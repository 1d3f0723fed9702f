#!/bin/sh
# tools/bench_ab.sh [-r ROUNDS] [-t T] [-p N] [-n N] [-d DEPTH] [-b 1,4,16] OLD_PAGECHAT NEW_PAGECHAT MODEL...
# Two pagechat binaries against each other: `bench` runs of each in
# alternating rounds (so a busy moment hits both alike), the median t/s of
# every test and the ratio new/old. For checking that a change costs no speed.
set -eu
ROUNDS=5 T=2 P=512 N=128 D=0 B=1
while getopts r:t:p:n:d:b: o; do
	case $o in r) ROUNDS=$OPTARG ;; t) T=$OPTARG ;; p) P=$OPTARG ;; n) N=$OPTARG ;; d) D=$OPTARG ;; b) B=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
OLD=${1:?usage: tools/bench_ab.sh [-r R] [-t T] [-p N] [-n N] [-d D] [-b 1,4,16] OLD NEW MODEL...}
NEW=${2:?NEW pagechat binary}
shift 2
for b in "$OLD" "$NEW"; do # a sanitizer build's timings mean nothing
	case $("$b" bench -m "$1" -p 0 -n 1 -r 1 --json 2>/dev/null) in
	*'san", "threads"'*) echo "bench_ab: $b is a sanitizer build; build it with make (no SANITIZE)" >&2; exit 2 ;;
	esac
done
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
# "test tps" lines of one bench --json run
tests() { python3 -c "
import json, sys
for t in json.load(sys.stdin)['tests']:
    print(t['test'].replace(' ', '_'), t['tps_median'])"; }
printf '%-28s %-14s %10s %10s %7s\n' model test old new ratio
for m in "$@"; do
	: >"$DIR/old"
	: >"$DIR/new"
	i=0
	while [ $i -lt "$ROUNDS" ]; do
		"$OLD" bench -m "$m" -t "$T" -p "$P" -n "$N" -d "$D" -r 1 --batch "$B" --json 2>/dev/null | tests >>"$DIR/old"
		"$NEW" bench -m "$m" -t "$T" -p "$P" -n "$N" -d "$D" -r 1 --batch "$B" --json 2>/dev/null | tests >>"$DIR/new"
		i=$((i + 1))
	done
	for t in $(cut -d' ' -f1 "$DIR/new" | sort -u); do
		o=$(grep "^$t " "$DIR/old" | cut -d' ' -f2 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
		n=$(grep "^$t " "$DIR/new" | cut -d' ' -f2 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
		printf '%-28s %-14s %10.1f %10.1f %6.3fx\n' "$(basename "$m")" "$t" "$o" "$n" "$(echo "$n $o" | awk '{print $1 / $2}')"
	done
done

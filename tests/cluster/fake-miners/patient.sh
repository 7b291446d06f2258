#!/bin/sh
# A miner for tests (image local/patient): at difficulty 3, every block after
# the first takes "days" (it sleeps until its Pod is stopped, burning no
# CPU), whole or in ranges; any other block of difficulty 4 or less is mined
# for real, nonce by nonce with sha256sum (from --start, for --count nonces
# when given: a range without a winner says so), so the operator verifies
# it as any block.
start=0
count=
while [ $# -gt 0 ]; do
  case "$1" in
    --index) index=$2; shift ;;
    --prev) prev=$2; shift ;;
    --difficulty) difficulty=$2; shift ;;
    --start) start=$2; shift ;;
    --count) count=$2; shift ;;
  esac
  shift
done
if [ "$difficulty" -eq 3 ] && [ "$index" -ge 2 ]; then
  exec sleep 86400
fi
[ "$difficulty" -le 4 ] || { echo "patient miner: difficulty $difficulty is neither short nor long" >&2; exit 2; }
nonce=$start
while :; do
  if [ -n "$count" ] && [ "$nonce" -ge $((start + count)) ]; then
    printf '{"index":%s,"prev":"%s","difficulty":%s,"start":%s,"count":%s,"elapsed_ms":1}' \
      "$index" "$prev" "$difficulty" "$start" "$count" > /dev/termination-log
    exit 0
  fi
  hash=$(printf '%s' "$index:$prev:$nonce" | sha256sum | cut -d' ' -f1 | tr 'a-f' 'A-F')
  first=$(printf '%d' "0x$(printf '%s' "$hash" | cut -c1)")
  # The first hex digit holds the first four bits: below 2^(4-d) has d zeros.
  if [ "$first" -lt $((1 << (4 - difficulty))) ]; then
    printf '{"index":%s,"prev":"%s","nonce":%s,"hash":"%s","attempts":%s,"difficulty":%s,"elapsed_ms":1}' \
      "$index" "$prev" "$nonce" "$hash" "$((nonce + 1))" "$difficulty" > /dev/termination-log
    exit 0
  fi
  nonce=$((nonce + 1))
done

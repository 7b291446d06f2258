#!/bin/sh
# A miner that breaks, for tests (image local/failing-miner).
echo "miner: simulated failure: the hash unit caught fire" >&2
exit 1

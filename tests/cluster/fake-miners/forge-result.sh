#!/bin/sh
# A dishonest miner for tests (image local/forger): claims a block it never
# mined. Its hash has the zero bits, but it is not SHA-256 of the block.
cat > /dev/termination-log <<'JSON'
{"index":1,"prev":"GENESIS","nonce":7,"hash":"0000000000000000000000000000000000000000000000000000000000000000","attempts":8,"difficulty":16,"elapsed_ms":1}
JSON

#!/bin/sh
# A miner for tests (image local/non-minimal): claims block 1 at difficulty 1
# with nonce 2, whose hash really has the leading zero bit (SHA-256 of
# "1:GENESIS:2" starts with 0x37), but nonce 1 already has it: valid, yet not
# the block the chain defines.
cat > /dev/termination-log <<'JSON'
{"index":1,"prev":"GENESIS","nonce":2,"hash":"37A75744D143660F9D8AA012EC133603EF303714D3D353ACD3E90E1B4DA4A6B6","attempts":3,"difficulty":1,"elapsed_ms":1}
JSON

#!/bin/sh
# A miner for tests (image local/oversize-nonce): claims block 1 at difficulty 1
# with a nonce above 2^63 whose hash really has the zero bit (SHA-256 of
# "1:GENESIS:9223372036854775810" starts with 0x48), but which no status can
# store (the API server keeps integers as int64), and which is not the smallest.
cat > /dev/termination-log <<'JSON'
{"index":1,"prev":"GENESIS","nonce":9223372036854775810,"hash":"48333A0890F5E1E95AE781DED1E9744132F439BF78EE25F443927A503856C747","attempts":9223372036854775811,"difficulty":1,"elapsed_ms":1}
JSON

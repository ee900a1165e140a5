#!/usr/bin/env bash
# Turn an HTML report into a PNG with headless Chromium (Debian's `chromium` package).
#   docs/screenshot.sh REPORT.html OUT.png [WIDTH] [HEIGHT]
# The flags keep Chromium off the network (the report needs none) and out of the
# user's profile: a fresh profile directory per run, removed afterwards.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTH=1100] [HEIGHT=2400]" >&2
  exit 2
fi
html=$(realpath "$1")
out=$(realpath -m "$2")
width=${3:-1100}
height=${4:-2400}
chrome=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$chrome" ]; then
  echo "screenshot.sh: no chromium found (apt-get install chromium, or set CHROMIUM=)" >&2
  exit 2
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --user-data-dir="$profile" \
  --window-size="${width},${height}" --screenshot="$out" "file://$html" >/dev/null 2>&1
test -s "$out"
echo "$out"

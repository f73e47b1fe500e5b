#!/usr/bin/env bash
# gpt-corpus.sh: writes the GPT example's corpus, the King James Bible (1611; public domain; 66
# books, 4.3 MB of English, ASCII), as plain text, one verse per line, to .data/kjv.txt
# (git-ignored) or the path given, then prints the path. Debian ships the text compressed in
# bible-kjv-text's own format; the `bible` program of bible-kjv prints it (both packages are
# installed by scripts/install-deps.sh). A file already there is kept.
#   scripts/gpt-corpus.sh                 # .data/kjv.txt
#   scripts/gpt-corpus.sh /tmp/kjv.txt
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$ROOT/.data/kjv.txt}
if [ ! -s "$out" ]; then
  if ! command -v bible >/dev/null; then
    echo "gpt-corpus.sh: the 'bible' program is missing: run scripts/install-deps.sh" \
         "(it installs Debian's bible-kjv and bible-kjv-text)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$out")"
  tmp="$out.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  # Genesis 1:1 to Revelation 22:21; -l0: no line wrapping (else it wraps at $COLUMNS).
  bible -l0 gen1:1-rev22:21 < /dev/null > "$tmp"
  size=$(stat -c %s "$tmp")
  if [ "$size" -lt 4000000 ] || ! grep -q '^Revelation 22$' "$tmp"; then
    echo "gpt-corpus.sh: 'bible' printed $size bytes, not the whole KJV text (4298239 bytes" \
         "from bible-kjv 4.38)" >&2
    exit 1
  fi
  mv "$tmp" "$out"
fi
echo "$out"

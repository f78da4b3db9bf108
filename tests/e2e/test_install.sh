#!/usr/bin/env bash
# The library as an embedder gets it: `cmake --install` into a scratch prefix, then, from outside
# the source tree, the example in include/pagellm.h compiled as the body of main() against the
# installed header and library through pkg-config, and run on stories260K. Also: the installed
# header compiles alone (no internal headers), and libpagellm holds no server code.
set -u
: "${PL_BINARY:?PL_BINARY must point at the pagellm executable}"
: "${PL_SHARED_DIR:?PL_SHARED_DIR must point at the shared data folder}"
: "${PL_BUILD_DIR:?PL_BUILD_DIR must point at the build directory}"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
MODEL="$PL_SHARED_DIR/models/stories260K.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }

# Sanitizer builds: the consumer links the same runtime.
CFLAGS="-std=c11 -Wall -Wextra -Werror"
[ "${PL_SANITIZE:-0}" = 1 ] && CFLAGS="$CFLAGS -fsanitize=address,undefined"
[ "${PL_TSAN:-0}" = 1 ] && CFLAGS="$CFLAGS -fsanitize=thread"

cmake --install "$PL_BUILD_DIR" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1
rc=$?
check "cmake --install" test "$rc" -eq 0
pc=$(find "$tmp/prefix" -name pagellm.pc | head -1)
check "pagellm.pc installed" test -n "$pc"
check "pagellm.h installed" test -f "$tmp/prefix/include/pagellm.h"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --static --cflags --libs pagellm 2>"$tmp/pc.err")
check "pkg-config pagellm ($(cat "$tmp/pc.err"))" test -n "$flags"

# The header alone.
cd "$tmp" || exit 1
printf '#include <pagellm.h>\nint main(void) { return PL_OK; }\n' >alone.c
cc $CFLAGS alone.c $flags -o alone 2>"$tmp/cc0.err"
rc=$?
check "pagellm.h compiles alone: $(head -3 "$tmp/cc0.err")" test "$rc" -eq 0

# No server or benchmark code in the core library.
lib=$(find "$tmp/prefix" -name libpagellm.a | head -1)
check "libpagellm.a installed" test -n "$lib"
check "libpagellm has no server symbols" test "$(nm -g --defined-only "$lib" 2>/dev/null | grep -c ' T pl_server_\| T pl_bench_')" = 0

# The header's example, verbatim.
sed -n '/^ \* Example/,/^ \*\//p' "$SRC/include/pagellm.h" | sed '1,/^ \*$/d; /^ \*\//d' |
    sed 's/^ \*     //; s/^ \*$//' >body.c
check "example found in pagellm.h" grep -q pl_engine_create body.c
{
    echo '#include <stdio.h>'
    echo '#include <pagellm.h>'
    echo 'int main(void) {'
    sed "s|\"stories260K.gguf\"|\"$MODEL\"|" body.c
    echo '    return 0;'
    echo '}'
} >example.c
cc $CFLAGS example.c $flags -o example 2>"$tmp/cc.err"
rc=$?
check "example compiles: $(head -5 "$tmp/cc.err")" test "$rc" -eq 0
out=$(./example 2>"$tmp/run.err")
rc=$?
check "example runs: $(head -3 "$tmp/run.err")" test "$rc" -eq 0
case "$out" in
", there was a little girl named Lily"*) ok ;;
*) bad "example output: '$out'" ;;
esac

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

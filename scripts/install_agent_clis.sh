#!/usr/bin/env bash
# Install the pinned agent CLIs (Codex CLI, Claude Code) into a reusable cache folder.
#
#   bash scripts/install_agent_clis.sh            # install if missing, print where
#   eval "$(bash scripts/install_agent_clis.sh --print-env)"   # also export the path
#
# The folder is $TURNKEEPER_AGENT_CLIS_CACHE (default ~/.cache/turnkeeper-agent-clis)
# /codex-<v>_claude-code-<v>; a complete install has a .complete stamp and is reused
# without touching the network. Both packages carry their native binary, so nothing
# downloads when the CLIs run. Tests find the binaries at that well-known path (the
# pins below are repeated in turnkeeper/hosts/_agent_cli.py; a test checks they agree)
# or through $TURNKEEPER_AGENT_CLIS_DIR.
set -euo pipefail

CODEX_VERSION="0.171.0"
CLAUDE_CODE_VERSION="2.1.197"

print_env=0
[ "${1:-}" = "--print-env" ] && print_env=1
say() { echo "[agent-clis] $*" >&2; }

cache_root="${TURNKEEPER_AGENT_CLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/turnkeeper-agent-clis}"
dest="$cache_root/codex-${CODEX_VERSION}_claude-code-${CLAUDE_CODE_VERSION}"

install() {
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    say "Node.js/npm not found: cannot install the agent CLIs (their tests will skip)"
    exit 1
  fi
  say "installing @openai/codex@${CODEX_VERSION} and @anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}"
  say "into $dest (node $(node --version), npm $(npm --version))"
  # Install into a scratch folder next to the destination and rename it into place,
  # so an interrupted install never leaves a half-filled folder that looks complete.
  tmp="$(mktemp -d "$cache_root/.install-XXXXXX")"
  chmod 755 "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  echo '{"name":"turnkeeper-agent-clis","private":true}' > "$tmp/package.json"
  npm install --prefix "$tmp" --no-audit --no-fund --no-update-notifier --loglevel=error \
    --save-exact "@openai/codex@${CODEX_VERSION}" "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" >&2
  for bin in codex claude; do
    if [ ! -x "$tmp/node_modules/.bin/$bin" ]; then
      say "install finished but node_modules/.bin/$bin is missing"
      exit 1
    fi
  done
  say "codex: $("$tmp/node_modules/.bin/codex" --version 2>&1 | head -n1)"
  say "claude: $(DISABLE_AUTOUPDATER=1 "$tmp/node_modules/.bin/claude" --version 2>&1 | head -n1)"
  printf 'codex=%s\nclaude-code=%s\n' "$CODEX_VERSION" "$CLAUDE_CODE_VERSION" > "$tmp/.complete"
  rm -rf "$dest"
  mv -T "$tmp" "$dest"
  trap - EXIT
  say "installed: $dest"
}

if [ -f "$dest/.complete" ]; then
  say "already installed: $dest"
else
  mkdir -p "$cache_root"
  if command -v flock >/dev/null 2>&1; then
    # One installer at a time per cache; a second one finds the first one's result.
    exec 9>"$cache_root/.lock"
    flock 9
  fi
  if [ -f "$dest/.complete" ]; then
    say "installed meanwhile by another run: $dest"
  else
    install
  fi
fi

if [ "$print_env" = 1 ]; then
  echo "export TURNKEEPER_AGENT_CLIS_DIR='$dest'"
else
  echo "TURNKEEPER_AGENT_CLIS_DIR=$dest"
fi

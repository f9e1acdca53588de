#!/usr/bin/env bash
# Build, once, the separate venv that runs a real Home Assistant for the test suite.
#
# Why a separate venv: Home Assistant pins exact versions of many libraries (httpx,
# pydantic-adjacent, urllib3<2...) that clash with the project's own. Why pre-install its
# integrations' requirements: the tests start `hass --skip-pip` with no network, so
# everything the configured integrations (api, websocket_api, demo and its dependencies)
# would pip-install at start-up has to be there already, at the versions HA pins.
#
# Idempotent: a marker file is written only when the install completed; without it the
# venv is rebuilt from scratch. Concurrent callers serialise on a lock file.
# Prints the venv path as its last line of output.
set -euo pipefail

HA_VERSION="2024.3.3"
VENV="${SEARCH_HA_VENV:-$HOME/.cache/search-router/ha-$HA_VERSION}"
MARKER="$VENV/.search-router-complete"
PYTHON="${SEARCH_HA_PYTHON:-python3.11}"

# What HA would pip-install at start-up for the integrations it loads: its always-on
# defaults (frontend -> file_upload: janus; backup: securetar; hardware: psutil-ha),
# conversation (a demo dependency), recorder (imported by demo and websocket_api), and
# the demo platforms (image_upload: Pillow; camera/stream: PyTurboJPEG, numpy; tts:
# mutagen; ffmpeg: ha-ffmpeg). Found by starting `hass --skip-pip` and reading the log.
# Versions come from HA's own package_constraints.txt, or its manifests where that file
# has no pin (securetar, numpy).
EXTRAS=(
  "josepy<2"                 # josepy 2 breaks acme -> every HTTP request answers 500
  home-assistant-frontend
  "janus==1.0.0"
  "securetar==2024.2.1"
  hassil
  home-assistant-intents
  SQLAlchemy
  fnv-hash-fast
  psutil-home-assistant
  Pillow
  PyTurboJPEG
  mutagen
  ha-ffmpeg
  "numpy==1.26.0"
)

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

# The marker holds the exact install spec, so changing EXTRAS rebuilds the venv.
SPEC="homeassistant==$HA_VERSION ${EXTRAS[*]}"
if [[ -f "$MARKER" && -x "$VENV/bin/hass" && "$(cat "$MARKER")" == "$SPEC" ]]; then
  echo "$VENV"
  exit 0
fi

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The pip this was verified with (24.x); the venv's bundled one may be older.
"$VENV/bin/python" -m pip install --quiet --upgrade "pip<25" wheel
"$VENV/bin/python" -m pip download --quiet --no-deps -d "$work" "homeassistant==$HA_VERSION"
"$VENV/bin/python" - "$work" <<'PY'
import pathlib, sys, zipfile
work = pathlib.Path(sys.argv[1])
wheel = next(work.glob("homeassistant-*.whl"))
with zipfile.ZipFile(wheel) as zf:
    data = zf.read("homeassistant/package_constraints.txt")
(work / "ha_constraints.txt").write_bytes(data)
PY
# (pip warns about the machine's extra file indexes lacking some names: harmless noise.)
"$VENV/bin/python" -m pip install --quiet -c "$work/ha_constraints.txt" \
  "$work"/homeassistant-*.whl "${EXTRAS[@]}"

printf '%s' "$SPEC" > "$MARKER"
echo "$VENV"

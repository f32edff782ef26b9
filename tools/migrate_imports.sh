#!/usr/bin/env bash
# One-off import rewrite for the pi0.5 family folder (oxygen_gym/model/pi05/) and the engine's KV cache module.
# Kept while branches that predate the move are merged; delete after.
set -euo pipefail
files=$(grep -rlE "oxygen_gym\.model\.(config|pi05|gemma|siglip|prompt|loading|weights|init|training|kv)\b" --include=*.py --include=Makefile --include=*.md "${@:-.}" | grep -v '/.venv/' || true)
for f in $files; do
  sed -i -E \
    -e 's/oxygen_gym\.model\.pi05\b([^.]|$)/oxygen_gym.model.pi05.modeling\1/g' \
    -e 's/oxygen_gym\.model\.(config|gemma|siglip|prompt|loading|weights|init|training)\b/oxygen_gym.model.pi05.\1/g' \
    -e 's/oxygen_gym\.model\.kv\b/oxygen_gym.engine.kv_cache/g' \
    "$f"
done

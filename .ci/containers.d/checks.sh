# The container lane's checks (sourced by .ci/containers, which defines podman, record, note and the
# IMAGE, WORK, CORPUS, RUN_ID, DECOY_MARK and API_PORT it checks). Each check records one summary row.

SECRET_NAMES='PASSWORD|SECRET|TOKEN|API_KEY|ACCESS_KEY|CREDENTIAL|PRIVATE|^LOREKEEPER_'
DATA="$WORK/data-$RUN_ID"

check_context() {
  note "build context: what reached /home/ray/lorekeeper"
  local found
  # Forbidden by .dockerignore: local environments, state, caches, secrets, and what the image does not need.
  found=$(podman run --rm --no-healthcheck --network=host "$IMAGE" bash -c 'cd /home/ray/lorekeeper && ls -A -d \
    .git .venv .env .lorekeeper .pytest_cache .ruff_cache .mypy_cache .hypothesis .import_linter_cache \
    cluster/secrets cluster/.env tests benchmarks docs helm .ci data 2>/dev/null' || true)
  if [ -n "$found" ]; then
    record "build context (.dockerignore)" FAIL "in the image: $(echo "$found" | tr '\n' ' ')"
  else
    local top
    top=$(podman run --rm --no-healthcheck --network=host "$IMAGE" bash -c 'cd /home/ray/lorekeeper && ls -A | tr "\n" " "')
    record "build context (.dockerignore)" ok "no .git/.venv/.env/data/secrets/caches; top level: $top"
  fi
}

check_user() {
  note "non-root"
  local user uid
  user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
  uid=$(podman run --rm --no-healthcheck --network=host "$IMAGE" id -u)
  if [ "$user" = ray ] && [ "$uid" = 1000 ]; then
    record "non-root user" ok "USER $user, id -u $uid"
  else
    record "non-root user" FAIL "USER '$user', id -u $uid"
  fi
}

# The directories of an image's layers in podman's storage (each layer's own files, top first).
image_layers() {
  podman image inspect --format '{{.GraphDriver.Data.UpperDir}}:{{.GraphDriver.Data.LowerDir}}' "$1" |
    tr ':' '\n' | grep -v '^$'
}

check_secrets() {
  note "no secret in the image's environment, history or layers"
  local env_hits history_hits layer_hits="" files="" layer n=0
  env_hits=$(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" | cut -d= -f1 |
    grep -E "$SECRET_NAMES" || true)
  history_hits=$(podman history --no-trunc --format '{{.CreatedBy}}' "$IMAGE" | grep -oE "[A-Z_]*($SECRET_NAMES)[A-Z_]*=[^ ]+" || true)
  while read -r layer; do
    n=$((n + 1))
    if "${NICE[@]}" grep -rlF --binary-files=text -m1 "$DECOY_MARK" "$layer" >/dev/null 2>&1; then
      layer_hits+="$layer "
    fi
    files+=$(cd "$layer" && find . \( -name .env -o -name 'id_rsa*' -o -name 'id_ed25519*' -o -name '*.key' \
      -o -path './home/ray/lorekeeper/cluster/secrets*' -o -name 'ray-auth-token' -o -name 'api-keys' \) -print 2>/dev/null | head -5)
  done < <(image_layers "$IMAGE")
  if [ "$n" -lt "$(podman image inspect --format '{{len .RootFS.Layers}}' "$IMAGE")" ]; then
    record "no secret in env/history/layers" FAIL "found $n layer folders for $(podman image inspect --format '{{len .RootFS.Layers}}' "$IMAGE") layers"
  elif [ -z "$env_hits$history_hits$layer_hits$files" ] && [ "${DECOY_PLANTED:-0}" = 1 ]; then
    record "no secret in env/history/layers" ok "$n layers searched for the planted cluster/secrets decoy and key files"
  elif [ -z "$env_hits$history_hits$layer_hits$files" ]; then
    # a reused image was not built by this run: no decoy was planted in its context to look for
    record "no secret in env/history/layers" ok "$n layers searched for key files (image reused: no decoy planted, run build for that)"
  else
    record "no secret in env/history/layers" FAIL "env: $env_hits history: $history_hits decoy in: $layer_hits files: $files"
  fi
}

check_ingest_and_search() {
  note "ingest of a read-only mounted folder, then search, on the embedded defaults"
  mkdir -p "$DATA" && chown 1000:100 "$DATA"
  local started rc=0 summary
  started=$(date +%s)
  podman run --rm --no-healthcheck --name "$RUN_ID-ingest" --network=host --shm-size=1g -v "$CORPUS:/books:ro" \
    -v "$DATA:/data" -e LOREKEEPER_DATA_DIR=/data "$IMAGE" \
    lorekeeper ingest /books --library lane-books --json --progress-interval 30 >"$WORK/ingest.json" 2>"$WORK/ingest.log" || rc=$?
  summary=$(python3 - "$WORK/ingest.json" <<'EOF' || true
import json, sys
report = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
files = report["files"]
done = [f for f in files if f["status"] == "completed"]
print(f"{len(done)}/{len(files)} files completed, {sum(f['chunks'] or 0 for f in files)} chunks")
sys.exit(0 if files and len(done) == len(files) else 1)
EOF
  )
  if [ $rc -eq 0 ] && [ -n "$summary" ] && ! grep -q "^.* 0 chunks" <<<"$summary"; then
    record "ingest (mounted :ro folder)" ok "$summary in $(($(date +%s) - started))s"
  else
    tail -20 "$WORK/ingest.log" >&2
    record "ingest (mounted :ro folder)" FAIL "exit $rc; $summary ($WORK/ingest.log)"
  fi
  rc=0
  podman run --rm --no-healthcheck --name "$RUN_ID-search" --network=host -v "$DATA:/data" -e LOREKEEPER_DATA_DIR=/data "$IMAGE" \
    lorekeeper search "how do fate points refresh" --limit 3 --json >"$WORK/search.json" 2>"$WORK/search.log" || rc=$?
  local hits
  hits=$(grep -c '"chunk_id"' "$WORK/search.json" || true)
  if [ $rc -eq 0 ] && [ "$hits" -ge 1 ]; then
    record "search" ok "$hits hits, first: $(python3 -c 'import json,sys; h=json.loads(open(sys.argv[1]).readline()); print(h["title"], "p.", h.get("page_start"), " > ".join(h["heading_path"])[:60])' "$WORK/search.json")"
  else
    record "search" FAIL "exit $rc, $hits hits ($WORK/search.log)"
  fi
}

wait_healthy() { # wait_healthy URL SECONDS
  local deadline=$(($(date +%s) + $2))
  while [ "$(date +%s)" -lt $deadline ]; do
    curl -fsS -m 5 "$1" >/dev/null 2>&1 && return 0
    sleep 2
  done
  return 1
}

play_turn() { # play_turn BASE_URL: a world, a campaign and a turn with the echo narrator
  python3 - "$1" <<'EOF'
import json, sys, urllib.request
base = sys.argv[1]
def post(path, body):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())
world = post("/api/v1/worlds", {"name": "Container lane"})
campaign = post("/api/v1/campaigns", {"world_id": world["id"], "name": "In a container", "profile": {"genre": "mystery"}})
turn = post(f"/api/v1/campaigns/{campaign['id']}/turns", {"text": "I open the creaking door"})
text = json.dumps(turn)
assert "I open the creaking door" in text, text[:500]
print(f"turn {turn.get('turn_id') or turn.get('id') or '?'} narrated ({len(text)} bytes)")
EOF
}

check_serve() { # `lorekeeper serve` (Ray Serve on the container's own Ray), then podman stop
  note "lorekeeper serve in a container: /health, a turn, the HEALTHCHECK, SIGTERM"
  local name="$RUN_ID-api" url="http://127.0.0.1:$API_PORT" started pid detail rc code
  started=$(date +%s)
  podman run -d --name "$name" --network=host --shm-size=1g -v "$DATA:/data" -e LOREKEEPER_DATA_DIR=/data \
    -e LOREKEEPER_NARRATOR_ENGINE=echo -e LOREKEEPER_API_PORT="$API_PORT" -e LOREKEEPER_API_HOST=127.0.0.1 \
    "$IMAGE" lorekeeper serve >/dev/null
  if wait_healthy "$url/health" 420; then
    record "serve: /health" ok "answered after $(($(date +%s) - started))s: $(curl -fsS "$url/health")"
  else
    podman logs --tail 30 "$name" >&2 || true
    record "serve: /health" FAIL "no answer in 420s"
    return
  fi
  pid=$(podman inspect --format '{{.State.Pid}}' "$name")
  record "serve: process user" "$([ "$(stat -c %u "/proc/$pid")" = 1000 ] && echo ok || echo FAIL)" \
    "uid $(stat -c %u "/proc/$pid") (pid $pid on the host)"
  if detail=$(play_turn "$url" 2>&1); then
    record "serve: a turn (echo narrator)" ok "$detail"
  else
    record "serve: a turn (echo narrator)" FAIL "$(echo "$detail" | tail -3)"
  fi
  rc=0
  detail=$(podman healthcheck run "$name" 2>&1) || rc=$?
  # With host networking the probed port (Ray's dashboard agent, 52365) is the host's: it must be this
  # container's agent that answered, not another Ray on the machine.
  local owner
  owner=$(port_owner 52365)
  if [ -n "$owner" ] && ! descends_from "$owner" "$pid"; then
    # another Ray on the host (a cluster lane, a test) took the port first: the probe cannot tell
    rc=1 detail="outside the container: $(ps -o args= -p "$owner" | cut -c1-60) ($detail)"
  elif [ -n "$owner" ]; then
    detail="(in the container) $detail"
  fi
  record "image HEALTHCHECK" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" \
    "$(podman image inspect --format '{{join .Config.Healthcheck.Test " "}}' "$IMAGE" | cut -c1-60): exit $rc, port 52365 held by pid ${owner:-none} ${detail}"
  started=$(date +%s)
  podman stop -t 30 "$name" >/dev/null
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  podman logs "$name" >"$WORK/serve.log" 2>&1 || true
  if [ "$code" = 0 ] && ! grep -q Traceback "$WORK/serve.log"; then
    record "podman stop (SIGTERM, 30s grace)" ok "exit 0 after $(($(date +%s) - started))s, no traceback"
  else
    record "podman stop (SIGTERM, 30s grace)" FAIL "exit $code after $(($(date +%s) - started))s ($WORK/serve.log)"
  fi
}

port_owner() { # the pid listening on a TCP port, if any
  ss -ltnpH "sport = :$1" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2
}

descends_from() { # descends_from PID ANCESTOR
  local pid=$1
  while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    [ "$pid" = "$2" ] && return 0
    pid=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null)
  done
  return 1
}

check_ingest_stop() { # `podman stop` during an ingest: it stops between batches and exits 143
  note "podman stop during an ingest"
  local name="$RUN_ID-ingest-stop" data="$DATA-stop" started code deadline
  mkdir -p "$data" && chown 1000:100 "$data"
  podman run -d --no-healthcheck --name "$name" --network=host --shm-size=1g -v "$CORPUS:/books:ro" \
    -v "$data:/data" -e LOREKEEPER_DATA_DIR=/data "$IMAGE" \
    lorekeeper ingest /books --library lane-stopped --executor ray --progress-interval 2 >/dev/null
  # once its Ray runs the pipeline's actors (the extract stage's, on the container's own Ray); --executor ray:
  # the folder is small enough that `auto` would run it in one process, where no MapWorker ever starts
  deadline=$(($(date +%s) + 300))
  until podman exec "$name" pgrep -f 'ray::MapWorker' >/dev/null 2>&1 || [ "$(date +%s)" -gt $deadline ]; do sleep 2; done
  started=$(date +%s)
  podman stop -t 30 "$name" >/dev/null
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  podman logs "$name" >"$WORK/ingest-stop.log" 2>&1 || true
  if [ "$code" = 143 ] && grep -q "ingest stopped by SIGTERM" "$WORK/ingest-stop.log" && ! grep -q Traceback "$WORK/ingest-stop.log"; then
    record "podman stop during an ingest" ok "exit 143 after $(($(date +%s) - started))s, unfinished files recorded"
  else
    record "podman stop during an ingest" FAIL "exit $code after $(($(date +%s) - started))s ($WORK/ingest-stop.log)"
  fi
  rm -rf "$data"
}

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
  local top extra
  top=$(podman run --rm --no-healthcheck --network=host "$IMAGE" bash -c 'cd /home/ray/lorekeeper && ls -A | tr "\n" " "')
  # .dockerignore is an allowlist: nothing at the top but what it lets in, and what pip install . makes in place
  extra=$(for entry in $top; do
    grep -qxF "!$entry" .dockerignore || case $entry in build | *.egg-info) ;; *) echo "$entry" ;; esac
  done | tr '\n' ' ')
  if [ -n "$found$extra" ]; then
    record "build context (.dockerignore)" FAIL "in the image: $(echo "$found" | tr '\n' ' ')$extra"
  else
    record "build context (.dockerignore)" ok "nothing but the allowlist; top level: $top"
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

play_turn() { # play_turn BASE_URL [CAMPAIGN_ID [NARRATION]]: a turn (a world and a campaign first when none is
  # given); prints {"campaign", "turn_id", "status", "complete"}; fails unless the turn is answered (with NARRATION)
  python3 - "$@" <<'EOF'
import json, sys, urllib.error, urllib.request
base, campaign_id, narration = (sys.argv[1:] + ["", ""])[:3]
def post(path, body):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()[:300]
if not campaign_id:
    _, world = post("/api/v1/worlds", {"name": "Container lane"})
    _, campaign = post("/api/v1/campaigns", {"world_id": world["id"], "name": "In a container", "profile": {"genre": "mystery"}})
    campaign_id = campaign["id"]
status, turn = post(f"/api/v1/campaigns/{campaign_id}/turns", {"text": "I open the creaking door"})
text = json.dumps(turn)
complete = status in (200, 201) and (narration or "I open the creaking door") in text
print(json.dumps({"campaign": campaign_id, "turn_id": turn.get("turn_id") if isinstance(turn, dict) else None,
                  "status": status, "complete": complete}))
sys.exit(0 if complete else 1)
EOF
}

json_field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1]).get(sys.argv[1]))' "$1"; }

# The host tests' own read-back snippets (tests/unit/test_sigterm.py), run in a container of the image on
# the same data: the container checks and the host tests judge by the same reading.
sigterm_snippet() { (cd "$ROOT" && "$PY" -c "import tests.unit.test_sigterm as t; print(t.$1)"); }

check_serve() { # `lorekeeper serve` (Ray Serve on the container's own Ray): /health, turns, HEALTHCHECK, stop mid-turn
  note "lorekeeper serve in a container: /health, a turn, the HEALTHCHECK, podman stop during a turn"
  local name="$RUN_ID-api" url="http://127.0.0.1:$API_PORT" model="$WORK/model-$RUN_ID" started pid detail rc code
  local owner turn campaign narration healthcheck
  rm -rf "$model" && mkdir -p "$model"
  # the slow narrator of tests/unit/test_sigterm.py on the host (the container shares its network)
  (cd "$ROOT" && exec "$PY" .ci/containers.d/slow_model.py "$model") >"$WORK/slow-model.log" 2>&1 &
  MODEL_PID=$!
  for _ in $(seq 60); do [ -s "$model/port" ] && break; sleep 0.5; done
  narration=$(cat "$model/narration" 2>/dev/null || true)
  started=$(date +%s)
  # The image's HEALTHCHECK probes LOREKEEPER_HEALTHCHECK_URL when set: this container's API on the port
  # the lane chose free, never a fixed port another process on the host may hold.
  podman run -d --name "$name" --network=host --shm-size=1g -v "$DATA:/data" -e LOREKEEPER_DATA_DIR=/data \
    -e LOREKEEPER_NARRATOR_ENGINE=openai -e LOREKEEPER_NARRATOR_BASE_URL="http://127.0.0.1:$(cat "$model/port")/v1" \
    -e LOREKEEPER_NARRATOR_MODEL=slow -e LOREKEEPER_API_PORT="$API_PORT" -e LOREKEEPER_API_HOST=127.0.0.1 \
    -e LOREKEEPER_HEALTHCHECK_URL="$url/health" "$IMAGE" lorekeeper serve >/dev/null
  if wait_healthy "$url/health" 420; then
    record "serve: /health" ok "answered after $(($(date +%s) - started))s on port $API_PORT: $(curl -fsS "$url/health" | cut -c1-120)"
  else
    podman logs --tail 30 "$name" >&2 || true
    record "serve: /health" FAIL "no answer in 420s"
    return
  fi
  pid=$(podman inspect --format '{{.State.Pid}}' "$name")
  record "serve: process user" "$([ "$(stat -c %u "/proc/$pid")" = 1000 ] && echo ok || echo FAIL)" \
    "uid $(stat -c %u "/proc/$pid") (pid $pid on the host)"
  if turn=$(play_turn "$url" "" "$narration" 2>&1); then
    record "serve: a turn (slow OpenAI-style model)" ok "$(echo "$turn" | tail -1)"
  else
    record "serve: a turn (slow OpenAI-style model)" FAIL "$(echo "$turn" | tail -3)"
  fi
  campaign=$(echo "$turn" | json_field campaign 2>/dev/null || true)
  # the image's own HEALTHCHECK, as podman runs it; then its command again to show what it probed
  rc=0
  podman healthcheck run "$name" >/dev/null 2>&1 || rc=$?
  healthcheck=$(podman image inspect --format '{{range .Config.Healthcheck.Test}}{{.}} {{end}}' "$IMAGE" | sed 's/^CMD //')
  # shellcheck disable=SC2086 # the image's HEALTHCHECK argv, word-split as podman does
  detail=$(podman exec "$name" $healthcheck 2>&1 | tail -1) || true
  owner=$(port_owner "$API_PORT" || true)
  if [ $rc -eq 0 ] && [[ $detail == "healthy: $url/health HTTP 200"* ]] && [ -n "$owner" ] && descends_from "$owner" "$pid"; then
    record "image HEALTHCHECK" ok "$healthcheck: exit 0, $detail (port $API_PORT: pid $owner, in the container)"
  else
    record "image HEALTHCHECK" FAIL "$healthcheck: exit $rc, ${detail:-no output}, port $API_PORT held by pid ${owner:-none}"
  fi
  check_stop_mid_turn "$name" "$url" "$model" "$campaign" "$narration"
  kill "$MODEL_PID" 2>/dev/null || true
  wait "$MODEL_PID" 2>/dev/null || true
  MODEL_PID=
  rm -rf "$model"
}

check_stop_mid_turn() { # podman stop (SIGTERM, then SIGKILL after 30 s) while a turn streams
  local name=$1 url=$2 model=$3 campaign=$4 narration=$5 started code turn_pid trc=0 seconds read_head head turn_id
  rm -f "$model/streaming"
  play_turn "$url" "$campaign" "$narration" >"$WORK/turn-stop.json" 2>&1 &
  turn_pid=$!
  for _ in $(seq 120); do [ -e "$model/streaming" ] && break; sleep 0.5; done
  if [ ! -e "$model/streaming" ]; then
    record "podman stop during a turn" FAIL "the turn never reached the model"
    podman stop -t 30 "$name" >/dev/null 2>&1 || true
    wait "$turn_pid" || true
    return
  fi
  started=$(date +%s)
  podman stop -t 30 "$name" >/dev/null
  seconds=$(($(date +%s) - started))
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  wait "$turn_pid" || trc=$?
  podman logs "$name" >"$WORK/serve.log" 2>&1 || true
  # the acknowledged turn is in the graph: read back by a new container on the same data
  read_head=$(sigterm_snippet _READ_HEAD || true)
  turn_id=$(json_field turn_id <"$WORK/turn-stop.json" 2>/dev/null || true)
  head=$(podman run --rm --no-healthcheck --network=host -v "$DATA:/data" -e LOREKEEPER_DATA_DIR=/data "$IMAGE" \
    python -c "$read_head" "$campaign" 2>>"$WORK/serve.log" | tail -1 | tr -d '"' || true)
  # as tests/unit/test_sigterm.py's serve test: exit 0 within the grace period plus 15 s, no traceback,
  # the turn in flight answered in full, and the campaign's head is that turn
  if [ "$code" = 0 ] && [ "$seconds" -lt 35 ] && [ $trc -eq 0 ] && ! grep -q Traceback "$WORK/serve.log" &&
    grep -q stop_requested "$WORK/serve.log" && [ -n "$turn_id" ] && [ "$head" = "$turn_id" ]; then
    record "podman stop during a turn" ok "exit 0 after ${seconds}s, the turn in flight answered in full and stored ($turn_id)"
  else
    record "podman stop during a turn" FAIL "exit $code after ${seconds}s, turn: $(tail -1 "$WORK/turn-stop.json" | cut -c1-120), head $head ($WORK/serve.log)"
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

check_ingest_stop() { # check_ingest_stop EXECUTOR: `podman stop` during an ingest (local: in one process; ray)
  local executor=$1 name="$RUN_ID-ingest-stop-$1" data="$DATA-stop-$1" started code deadline seconds jobs verdict
  note "podman stop during an ingest (--executor $executor)"
  mkdir -p "$data" && chown 1000:100 "$data"
  podman run -d --no-healthcheck --name "$name" --network=host --shm-size=1g -v "$CORPUS:/books:ro" \
    -v "$data:/data" -e LOREKEEPER_DATA_DIR=/data "$IMAGE" \
    lorekeeper ingest /books --library lane-stopped --executor "$executor" --progress-interval 2 >/dev/null
  # the moment tests/unit/test_sigterm.py signals: ray, once a stage actor runs (ray::MapWorker on the
  # container's own Ray); local, 6 s after the write stage opened its stores (the vectors folder appears)
  deadline=$(($(date +%s) + 300))
  if [ "$executor" = ray ]; then
    until podman exec "$name" pgrep -f 'ray::MapWorker' >/dev/null 2>&1 || [ "$(date +%s)" -gt $deadline ]; do sleep 1; done
  else
    until [ -e "$data/vectors" ] || [ "$(date +%s)" -gt $deadline ]; do sleep 0.5; done
    sleep 6
  fi
  if [ "$(podman inspect --format '{{.State.Running}}' "$name")" != true ]; then
    podman logs "$name" >"$WORK/ingest-stop-$executor.log" 2>&1 || true
    record "podman stop during an ingest ($executor)" FAIL "it was no longer running when the signal was due ($WORK/ingest-stop-$executor.log)"
    return
  fi
  started=$(date +%s)
  podman stop -t 30 "$name" >/dev/null
  seconds=$(($(date +%s) - started))
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  podman logs "$name" >"$WORK/ingest-stop-$executor.log" 2>&1 || true
  jobs=$(podman run --rm --no-healthcheck --network=host -v "$data:/data" -e LOREKEEPER_DATA_DIR=/data "$IMAGE" \
    python -c "$(sigterm_snippet _READ_JOBS)" 2>>"$WORK/ingest-stop-$executor.log" | tail -1 || true)
  # the host tests' verdict on the jobs: ray, every file failed saying why; local, a file finished before the
  # signal stays completed and every other one failed saying why
  verdict=$(python3 - "$executor" "$jobs" <<'EOF'
import json, sys
executor, jobs = sys.argv[1], json.loads(sys.argv[2] or "[]")
failed = [error for status, error in jobs if status == "failed"]
good = bool(jobs) and all("stopped by SIGTERM" in (e or "") for e in failed) and (
    len(failed) == len(jobs) if executor == "ray" else bool(failed) and {s for s, _ in jobs} <= {"completed", "failed"})
print(("ok " if good else "FAIL ") + f"{len(jobs) - len(failed)} completed, {len(failed)} failed 'stopped by SIGTERM'")
EOF
  ) || verdict="FAIL unreadable: ${jobs:0:120}"
  if [ "$code" = 143 ] && [ "$seconds" -lt 30 ] && grep -q "ingest stopped by SIGTERM" "$WORK/ingest-stop-$executor.log" &&
    ! grep -q Traceback "$WORK/ingest-stop-$executor.log" && [ "${verdict%% *}" = ok ]; then
    record "podman stop during an ingest ($executor)" ok "exit 143 after ${seconds}s, jobs: ${verdict#* }"
  else
    record "podman stop during an ingest ($executor)" FAIL "exit $code after ${seconds}s, jobs: ${verdict:-unread} ($WORK/ingest-stop-$executor.log)"
  fi
  rm -rf "$data"
}

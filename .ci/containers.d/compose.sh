# The container lane's compose step (sourced by .ci/containers): cluster/docker-compose.yml with
# cluster/docker-compose.standin.yml, run by podman-compose (pip, in the lane's own venv), in a compose
# project of its own ($RUN_ID-compose: its network, volumes and containers are removed afterwards).
#   - the store stand-ins (cluster/store-standins/) built on the CPU image;
#   - `up -d minio opensearch neo4j`: each store's own health check of the real file passes (podman runs
#     the checks here on demand: no systemd to time them, so the lane runs `podman healthcheck run`);
#   - the `api` service's container (`run --no-deps api`: its image, environment, secrets and network)
#     with `lorekeeper serve --direct`: /health reports every store, and a book ingested through
#     POST /api/v1/library/ingest completes and is found by POST /api/v1/search.
# What it cannot run here: Qdrant (no server installs: the API's vectors are the embedded engine,
# LOREKEEPER_VECTOR_URL=/home/ray/vectors without Qdrant's key, the one setting the lane changes, beside
# the ingest root it mounts the books at) and the Ray head/worker/api services under `serve run` (they wait on Qdrant).

COMPOSE_BOOK=${LK_COMPOSE_BOOK:-fate-accelerated-SRD.md}

compose_tool() {
  if [ ! -x "$WORK/venv/bin/podman-compose" ]; then
    note "podman-compose (pip, in $WORK/venv)"
    python3 -m venv "$WORK/venv"
    "$WORK/venv/bin/pip" install -q "podman-compose==1.6.0" >"$WORK/podman-compose-install.log" 2>&1
  fi
}

wait_container_healthy() { # wait_container_healthy NAME SECONDS: run its health check until it passes
  local deadline=$(($(date +%s) + $2))
  while [ "$(date +%s)" -lt $deadline ]; do
    podman healthcheck run "$1" >/dev/null 2>&1 && return 0
    sleep 3
  done
  return 1
}

compose_api_call() { # compose_api_call CONTAINER: library, ingest, job, health, search through the API
  podman exec -e LK_BOOK="$COMPOSE_BOOK" -i "$1" python - <<'PY'
import json, time, urllib.request, urllib.error
base = "http://127.0.0.1:8000"
key = open("/run/secrets/api-keys").read().split()[0]
def call(method, path, body=None):
    request = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
import os
deadline = time.time() + 600
while True:
    try:
        code, health = call("GET", "/health")
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(3)
print("HEALTH", json.dumps(health.get("checks", health)))
code, library = call("POST", "/api/v1/library/libraries", {"name": "compose-books"})
assert code == 201, (code, library)
book = os.environ["LK_BOOK"]
code, job = call("POST", "/api/v1/library/ingest", {"path": f"/books/{book}", "library_uid": library["uid"]})
assert code == 202, (code, job)
started = time.time()
while job["status"] not in ("completed", "failed") and time.time() - started < 900:
    time.sleep(5)
    code, job = call("GET", f"/api/v1/library/jobs/{job['job_id']}")
print("JOB", json.dumps({k: job.get(k) for k in ("status", "chunks_created", "concepts_extracted", "error", "item_uid")}), f"{time.time() - started:.0f}s")
started = time.time()
while True:  # 503: a store or engine unavailable, "retrying later may succeed" (the search models may still load)
    code, found = call("POST", "/api/v1/search", {"query": "how do fate points refresh", "limit": 3})
    if code != 503 or time.time() - started > 180:
        break
    print("SEARCH-RETRY", code, json.dumps(found)[:300])
    time.sleep(10)
print("SEARCH", code, len((found or {}).get("hits", []) if isinstance(found, dict) else []))
if code != 200:
    print("SEARCH-BODY", json.dumps(found)[:500])
PY
}

step_compose() {
  note "the compose stack: cluster/docker-compose.yml + cluster/docker-compose.standin.yml"
  ensure_image
  [ -n "${BUILD_MOUNTS+x}" ] || pip_sources
  compose_tool
  local s project="$RUN_ID-compose" env_file="$WORK/compose-$RUN_ID.env" started
  for s in minio opensearch neo4j; do
    note "store stand-in $s"
    build "standin-$s" -f cluster/store-standins/Containerfile --build-arg STANDIN="$s" \
      --build-arg LOREKEEPER_IMAGE="$IMAGE" -t "localhost/lorekeeper/standin-$s:ci" cluster/store-standins
    record "build stand-in $s" ok "${BUILD_SECONDS}s ($BUILD_CACHED), $(size_of "localhost/lorekeeper/standin-$s:ci")"
    STANDIN_STORES+=("localhost/lorekeeper/standin-$s:ci")
  done
  podman tag "$IMAGE" localhost/lorekeeper:0.1.0-cpu # the compose file's image name
  umask 077
  COMPOSE_CLEANUP+=("$env_file")
  cat >"$env_file" <<ENV
LOREKEEPER_BLOB_ACCESS_KEY=lorekeeper
LOREKEEPER_BLOB_SECRET_KEY=$(openssl rand -hex 24)
LOREKEEPER_TEXT_PASSWORD=Lk-$(openssl rand -hex 16)-X
LOREKEEPER_VECTOR_API_KEY=$(openssl rand -hex 32)
LOREKEEPER_GRAPH_PASSWORD=$(openssl rand -hex 24)
ENV
  mkdir -p cluster/secrets
  for s in ray-auth-token api-keys; do
    if [ ! -e "cluster/secrets/$s" ]; then
      openssl rand -hex 32 >"cluster/secrets/$s"
      chown 1000:100 "cluster/secrets/$s" # bind-mounted as is: readable by the containers' ray user only
      COMPOSE_CLEANUP+=("$ROOT/cluster/secrets/$s")
    fi
  done
  umask 022
  COMPOSE=("${NICE[@]}" "$WORK/venv/bin/podman-compose" -p "$project" -f cluster/docker-compose.yml
    -f cluster/docker-compose.standin.yml -f cluster/docker-compose.lane.yml --env-file "$env_file")
  started=$(date +%s)
  "${COMPOSE[@]}" up -d minio opensearch neo4j >"$WORK/compose-up.log" 2>&1 || { tail -20 "$WORK/compose-up.log" >&2; record "compose up (stores)" FAIL "($WORK/compose-up.log)"; }
  for s in minio opensearch neo4j; do
    local name="${project}_${s}_1"
    if wait_container_healthy "$name" 180; then
      record "compose: $s healthy" ok "its own health check after $(($(date +%s) - started))s: $(podman inspect --format '{{join .Config.Healthcheck.Test " "}}' "$name" | cut -c1-70)"
    else
      podman logs --tail 20 "$name" >&2 || true
      record "compose: $s healthy" FAIL "no pass in 180s"
    fi
  done
  note "the api service's container: lorekeeper serve --direct, /health, an ingest through the API"
  local api="$RUN_ID-compose_api_lane" out
  started=$(date +%s)
  "${COMPOSE[@]}" run -d --no-deps --name "$api" -v "$CORPUS:/books:ro" -e LOREKEEPER_VECTOR_URL=/home/ray/vectors \
    -e LOREKEEPER_INGEST_ROOTS=/books api env -u LOREKEEPER_VECTOR_API_KEY lorekeeper serve --direct \
    >"$WORK/compose-api.log" 2>&1 || true
  out=$(compose_api_call "$api" 2>&1) || true
  podman logs "$api" >>"$WORK/compose-api.log" 2>&1 || true
  echo "$out" >"$WORK/compose-checks.log"
  compose_records "$out" "$started"
  compose_down
}

# Stop and remove what the compose step started (its containers, network and volumes), its env file and
# the secret files it made; the lane's exit trap calls it too.
COMPOSE=() COMPOSE_CLEANUP=()
compose_down() {
  [ ${#COMPOSE[@]} -gt 0 ] || return 0
  podman rm -f -t 5 "$RUN_ID-compose_api_lane" >/dev/null 2>&1 || true
  "${COMPOSE[@]}" down -v -t 30 >"$WORK/compose-down.log" 2>&1 || true
  rm -f "${COMPOSE_CLEANUP[@]}"
  COMPOSE=()
}

compose_records() { # compose_records OUTPUT STARTED
  local health job search
  health=$(grep '^HEALTH ' <<<"$1" | cut -d' ' -f2- || true)
  job=$(grep '^JOB ' <<<"$1" | cut -d' ' -f2- || true)
  search=$(grep '^SEARCH ' <<<"$1" | cut -d' ' -f2- || true)
  if [ -n "$health" ] && python3 -c 'import json,sys; c=json.loads(sys.argv[1]); parts={k: (v.get("status") if isinstance(v, dict) else v) for k, v in c.items()}; sys.exit(0 if all(parts.get(k) == "ok" for k in ("graph", "blob", "text", "vectors")) else 1)' "$health" 2>/dev/null; then
    record "compose: API /health, every store" ok "$(cut -c1-300 <<<"$health")"
  else
    record "compose: API /health, every store" FAIL "${health:-no answer} ($WORK/compose-api.log)"
  fi
  if grep -q '"status": "completed"' <<<"$job"; then
    record "compose: ingest through the API" ok "$COMPOSE_BOOK: $job"
  else
    tail -5 <<<"$1" >&2
    record "compose: ingest through the API" FAIL "${job:-no job} ($WORK/compose-checks.log)"
  fi
  if [ "${search%% *}" = 200 ] && [ "${search##* }" -ge 1 ] 2>/dev/null; then
    record "compose: search through the API" ok "${search##* } hits"
  else
    record "compose: search through the API" FAIL "${search:-no answer}"
  fi
}

# The container lane's Ray cluster step (sourced by .ci/containers): the cluster lane's own checks
# (tests/cluster/test_cluster.py, run by .ci/cluster on `ray start` processes) with each Ray node a
# container of $IMAGE (tests/cluster/containers.py): host networking with ports of its own per node,
# its own --num-cpus; S3 on nanio, OpenSearch on osmem-server and the graph on FalkorDB over Bolt run on
# the host as in the process lane, the vector index embedded on the head. The checks, in order:
#   - a local single-node run of two fate-srd books is the reference (store by store);
#   - `ray job submit -- python -m jobs ingest s3://…` on the head's dashboard: stages on both nodes,
#     every store holds each chunk once, the same chunks (sequence and content hash) as the reference;
#   - the same job with the worker's container killed mid-job (`podman kill`): the same again;
#   - `serve deploy` of cluster/serve-config.yaml (one HTTP port on one machine): a turn and a search
#     answer; the worker's container killed, its replicas are replaced on the head, a turn answers.

step_cluster() {
  note "a Ray cluster of containers of $IMAGE: tests/cluster/test_cluster.py"
  ensure_image
  local started rc=0 xml="$WORK/cluster-junit.xml"
  started=$(date +%s)
  rm -f "$xml"
  (
    cd "$ROOT"
    export LK_CLUSTER_IMAGE="$IMAGE" LK_PODMAN="nice -n 19 ionice -c3 $PODMAN_BIN" LK_RUN_ID="$RUN_ID-cluster"
    export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
    "${NICE[@]}" "$PY" -m pytest -m cluster tests/cluster/test_cluster.py -p no:cacheprovider -v -s \
      --junitxml="$xml" >"$WORK/cluster.log" 2>&1
  ) || rc=$?
  if [ ! -s "$xml" ]; then
    tail -30 "$WORK/cluster.log" >&2
    record "cluster: tests/cluster" FAIL "exit $rc after $(($(date +%s) - started))s, no result ($WORK/cluster.log)"
    return
  fi
  local name result seconds
  while IFS=$'\t' read -r name result seconds; do
    record "cluster: ${name#test_}" "$result" "${seconds}s"
  done < <(python3 - "$xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).iter("testcase"):
    bad = case.find("failure") if case.find("failure") is not None else case.find("error")
    skipped = case.find("skipped") is not None
    result = "FAIL" if bad is not None else "SKIP" if skipped else "ok"
    print(f"{case.get('name')[:60]}\t{result}\t{float(case.get('time') or 0):.0f}")
PY
  )
  # what the checks printed: where the stages ran, the kill, the replicas before and after
  grep -oE '(stage report[^:]*|killed worker1|replicas (before|after)|timings):? .*' "$WORK/cluster.log" | cut -c1-300 |
    sed 's/^/   /' >&2 || true
  [ $rc -eq 0 ] || tail -40 "$WORK/cluster.log" >&2
}

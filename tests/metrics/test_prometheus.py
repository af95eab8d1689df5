"""`GET /metrics` read by Prometheus's own parser (`prometheus_client.parser`): who may scrape, the
families and their types, and per-sandbox values that exist and move when a sandbox works."""

import time

from prometheus_client.parser import text_string_to_metric_families


def scrape(server, key=None):
    status, body, ctype = server.call("GET", "/metrics", key=key or server.token)
    assert status == 200, (status, body)
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def value(families, family, sample_name, **labels):
    """The value of the sample of `family` named `sample_name` whose labels include `labels`, or None."""
    for s in families[family].samples:
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_scrapes_need_the_token_or_the_admin_key(server):
    status, body, _ = server.call("GET", "/metrics")
    assert status == 401 and b"--metrics-token-file" in body, body
    status, _, _ = server.call("GET", "/metrics", key="a" * 48)
    assert status == 401
    tenant = server.native("POST", "/v1/keys", {"tenant": "carol"})["key"]
    status, body, _ = server.call("GET", "/metrics", key=tenant)
    assert status == 403 and b"carol" in body, body
    scrape(server, key=server.admin_key)
    scrape(server, key=server.token)


def test_families_have_their_types(server):
    fams = scrape(server)
    want = {
        "sandlot_up": "gauge",
        "sandlot_build_info": "gauge",
        "sandlot_start_time_seconds": "gauge",
        "sandlot_uptime_seconds": "gauge",
        "sandlot_http_request_duration_seconds": "histogram",
        "sandlot_sandboxes": "gauge",
        "sandlot_tenant_sandboxes": "gauge",
        "sandlot_tenant_memory_bytes": "gauge",
        "sandlot_metrics_last_pass_duration_seconds": "gauge",
        "sandlot_metrics_sandboxes_left_out": "gauge",
        # The parser names a counter family without its `_total`.
        "sandlot_sandbox_cpu_usage_seconds": "counter",
        "sandlot_sandbox_cpu_throttled_seconds": "counter",
        "sandlot_sandbox_oom_kills": "counter",
        "sandlot_sandbox_memory_bytes": "gauge",
        "sandlot_sandbox_memory_limit_bytes": "gauge",
        "sandlot_sandbox_pids": "gauge",
        "sandlot_sandbox_disk_used_bytes": "gauge",
        "sandlot_sandbox_network_transmit_bytes": "counter",
        "sandlot_sandbox_network_connections": "gauge",
        "sandlot_sandbox_network_connections_opened": "counter",
    }
    got = {name: fams[name].type for name in want if name in fams}
    assert got == want
    assert value(fams, "sandlot_up", "sandlot_up") == 1
    info = fams["sandlot_build_info"].samples[0]
    assert info.value == 1 and info.labels["version"], info
    states = {s.labels["state"] for s in fams["sandlot_sandboxes"].samples}
    assert states == {"creating", "running", "paused", "stopped", "failed"}


def test_latency_histogram_is_by_route_template_with_cumulative_buckets(server):
    key = server.admin_key
    for _ in range(3):
        server.call("GET", "/v1/sandboxes/sb_doesnotexist0000000000", key=key)
    fams = scrape(server)
    h = fams["sandlot_http_request_duration_seconds"]
    labels = {"route": "/v1/sandboxes/{id}", "method": "GET", "status": "4xx"}
    buckets = [
        (s.labels["le"], s.value)
        for s in h.samples
        if s.name.endswith("_bucket") and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert buckets, "no series for the route template"
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), buckets
    assert buckets[-1][0] == "+Inf"
    count = value(fams, "sandlot_http_request_duration_seconds", "sandlot_http_request_duration_seconds_count", **labels)
    assert count >= 3 and buckets[-1][1] == count
    # Raw paths never become labels.
    assert not any("sb_doesnotexist" in s.labels.get("route", "") for s in h.samples)


def test_per_sandbox_values_exist_and_move(server):
    sb = server.native("POST", "/v1/sandboxes", {"cpu": 1.0, "memory_mb": 512})
    sid = sb["id"]
    try:
        labels = {"sandbox": sid, "tenant": "admin"}

        def figure(fams, fam, sample=None):
            return value(fams, fam, sample or fam, **labels)

        deadline = time.time() + 30
        while True:
            fams = scrape(server)
            if figure(fams, "sandlot_sandbox_memory_bytes") is not None:
                break
            assert time.time() < deadline, "no series for the sandbox"
            time.sleep(0.5)
        cpu0 = figure(fams, "sandlot_sandbox_cpu_usage_seconds", "sandlot_sandbox_cpu_usage_seconds_total")
        assert figure(fams, "sandlot_sandbox_memory_limit_bytes") == 512 << 20
        assert figure(fams, "sandlot_sandbox_cpu_limit_cores") == 1
        assert figure(fams, "sandlot_sandbox_pids") >= 1
        assert value(fams, "sandlot_tenant_sandboxes", "sandlot_tenant_sandboxes", tenant="admin", state="running") >= 1

        # 150 MiB held for a while, and a busy loop.
        hold = "import time; b = bytearray(150 << 20); time.sleep(10)"
        started = server.native("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["python3", "-c", hold], "background": True})
        busy = server.native("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", "timeout 3 sh -c 'while :; do :; done'; true"]})
        assert busy["status"] == "exited", busy
        deadline = time.time() + 30
        while True:
            fams = scrape(server)
            cpu = figure(fams, "sandlot_sandbox_cpu_usage_seconds", "sandlot_sandbox_cpu_usage_seconds_total")
            mem = figure(fams, "sandlot_sandbox_memory_bytes")
            if cpu - cpu0 >= 0.5 and mem >= 120 << 20:
                break
            if time.time() > deadline:
                result = server.native("POST", f"/v1/sandboxes/{sid}/processes/{started['pid']}/wait")
                raise AssertionError(f"cpu {cpu0} -> {cpu}, memory {mem}; the holder: {result}")
            time.sleep(0.5)
        assert value(fams, "sandlot_tenant_memory_bytes", "sandlot_tenant_memory_bytes", tenant="admin") >= mem
    finally:
        server.call("DELETE", f"/v1/sandboxes/{sid}", key=server.admin_key)
    # Gone at the next pass: no series for a deleted sandbox.
    time.sleep(1.5)
    fams = scrape(server)
    assert value(fams, "sandlot_sandbox_memory_bytes", "sandlot_sandbox_memory_bytes", sandbox=sid) is None

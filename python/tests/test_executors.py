"""Sweeps on executors: concurrent.futures, Dask (LocalCluster on 127.0.0.1) and Ray (local
cluster inside a loopback-only network namespace, scripts/test) equal the local run byte for
byte."""

import concurrent.futures
import filecmp
import os

import pytest

import dpbandits


def same(a, b, tmp_path):
    assert a.summary_csv == b.summary_csv
    assert a.runs.keys() == b.runs.keys()
    for k in a.runs:
        assert a.runs[k].tobytes() == b.runs[k].tobytes(), k
    assert a.manifest == b.manifest
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    for f in ["summary.csv", "manifest.json", "journal.bin"]:
        assert filecmp.cmp(tmp_path / "a" / f, tmp_path / "b" / f, shallow=False), f


def test_thread_and_process_pools(small_spec, tmp_path):
    local = dpbandits.run(small_spec)
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        same(dpbandits.run(small_spec, executor=ex, shards=5, threads=1), local, tmp_path / "t")
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        same(dpbandits.run(small_spec, executor=ex, threads=1), local, tmp_path / "p")


def test_executor_refuses_python_env(small_spec):
    class E:
        means = [0.5, 0.4]

        def pull(self, arm, t):
            return 0.5

    small_spec["policy"] = [{"kind": "ucb1"}]
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        with pytest.raises(ValueError, match="executor"):
            dpbandits.run(small_spec, env=E(), executor=ex)
    with pytest.raises(ValueError, match="shards"):
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            dpbandits.run(small_spec, executor=ex, shards=0)


def test_dask_local_cluster(small_spec, tmp_path):
    distributed = pytest.importorskip("distributed")
    local = dpbandits.run(small_spec)
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address=None,
        processes=True,
    ) as cluster, distributed.Client(cluster) as client:
        res = dpbandits.run(small_spec, executor=client, shards=4, threads=1)
    same(res, local, tmp_path)


@pytest.mark.ray
@pytest.mark.skipif(
    os.environ.get("DPBANDITS_RAY_NETNS") != "1",
    reason="Ray binds the machine's external address: scripts/test runs this test inside a "
    "loopback-only network namespace (DPBANDITS_RAY_NETNS=1)",
)
def test_ray_local_cluster(small_spec, tmp_path):
    import ray

    local = dpbandits.run(small_spec)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        res = dpbandits.run(small_spec, executor=dpbandits.RayExecutor(), shards=3, threads=1)
        res2 = dpbandits.run(small_spec, executor=ray, threads=1)
    finally:
        ray.shutdown()
    same(res, local, tmp_path / "a")
    same(res2, local, tmp_path / "b")

"""The shipped kernel class table (``deploy/kernels/classes.yaml``) and class files of a site:
real kernel names from the libraries' sources land in their class, every kernel of the public
sample traces is classified, and a bad file is refused naming its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcscope.analysis.traces.kernel_classes import ClassTable
from hpcscope.service.traces.comm_report import bundled_table
from hpcscope.service.traces.kernel_classes import ClassFileError, load_class_table
from hpcscope.service.traces.pipeline import analyze, to_json
from tests.support.paths import FIXTURES

#: (name as the profiler shows it, events, expected class); names from the libraries' sources
#: (the comments of deploy/kernels/classes.yaml cite the files) and from the sample traces.
NAMES = [
    (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "gpu",
        "dp_all_reduce",
    ),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "gpu", "dp_all_reduce"),
    (
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "gpu",
        "dp_shard",
    ),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "gpu", "dp_shard"),
    (
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "gpu",
        "pp_send_recv",
    ),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "gpu", "other_comm"),
    (
        "void deep_ep::internode_ll::dispatch<false, 7168, 9, 4>(void*, float*, int*)",
        "gpu",
        "ep_all_to_all",
    ),
    ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int*, int)", "gpu", "ep_all_to_all"),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)", "gpu", "ep_all_to_all"),
    # DeepSeek's own build, as the public H800 training rank (deepseek-ai/profile-data) names it
    (
        "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)",
        "gpu",
        "ep_all_to_all",
    ),
    (
        "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*)",
        "gpu",
        "ep_all_to_all",
    ),
    (
        "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>"
        "(__nv_bfloat16 const*, int)",
        "gpu",
        "compute",
    ),
    (
        "void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<__nv_bfloat16, float>>"
        "(layer_norm::FwdParams)",
        "gpu",
        "compute",
    ),
    ("rotary_kernel", "gpu", "compute"),
    (
        "void allreduce8<__half>(__half*, __half*, mscclpp::DeviceHandle<mscclpp::SmChannel>*)",
        "gpu",
        "dp_all_reduce",
    ),
    (
        "userbuffers_fp16_sum_inplace_gpu_rr_rs(int, int, int, int, int, int, void**, int)",
        "gpu",
        "tp_collective",
    ),
    (
        "kuserbuffers_pushsendrecv(int*, int*, int4*, int4*, int, int, int, int*, int*)",
        "gpu",
        "tp_collective",
    ),
    (
        "void nvshmemi_proxy_rma_entrypoint<(nvshmemi_op_t)0, 1>(void*, void*, rma_bytesdesc_t)",
        "gpu",
        "other_comm",
    ),
    ("Memcpy PtoP (Device -> Device)", "gpu", "peer_copy"),
    ("Memcpy HtoD (Pinned -> Device)", "gpu", "compute"),
    ("volta_sgemm_128x64_nn", "gpu", "compute"),
    ("gloo:all_to_all", "cpu", "ep_all_to_all"),
    ("gloo:all_reduce", "cpu", "dp_all_reduce"),
    ("gloo:recv", "cpu", "pp_send_recv"),
    ("aten::mm", "cpu", "compute"),
]


@pytest.mark.parametrize(("name", "events", "klass"), NAMES, ids=[n[0][:40] for n in NAMES])
def test_real_names_land_in_their_class(name: str, events: str, klass: str) -> None:
    match = bundled_table().classify(name, events)
    assert match is not None and match.klass == klass


def test_launch_operators_name_what_they_launch() -> None:
    table = bundled_table()
    for name, klass in [
        ("c10d::alltoall_base_", "ep_all_to_all"),
        ("nccl:all_to_all", "ep_all_to_all"),
        ("c10d::_reduce_scatter_base_", "dp_shard"),
        ("c10d::recv_", "pp_send_recv"),
        ("record_param_comms", "other_comm"),
    ]:
        match = table.classify(name, "cpu")
        assert match is not None and match.role == "launch" and match.klass == klass, name


@pytest.mark.parametrize(
    "path",
    ["hta_trace_filter_2rank", "param_dlrm_8rank", "hta_df_index_resolver_1rank"],
)
def test_every_kernel_of_the_sample_traces_is_classified(path: str) -> None:
    doc = to_json(analyze([FIXTURES / "traces" / path]))["comm_classes"]
    assert doc is not None
    assert doc["unclassified"] == [] and doc["unclassified_seconds"] == 0.0
    assert doc["classes"]  # NCCL collectives in all three


def test_a_site_file_comes_first(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        "schema: hpcscope.kernel-classes/1\n"
        "rules:\n"
        "  - {match: '^my_a2a_kernel', events: gpu, op: all_to_all, dimension: ep}\n"
        "  - {match: '^ncclDevKernel_AllGather', events: gpu, op: all_gather, dimension: tp}\n"
    )
    table = load_class_table([site])
    assert isinstance(table, ClassTable)
    assert table.classify("my_a2a_kernel<1>", "gpu").klass == "ep_all_to_all"  # type: ignore[union-attr]
    assert table.classify("ncclDevKernel_AllGather_RING", "gpu").klass == "tp_collective"  # type: ignore[union-attr]
    assert table.rules[0].source == f"{site}:3"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        (
            "schema: hpcscope.kernel-classes/1\nrules:\n"
            "  - {match: a, events: gpu, op: compute, dimension: none}\n"
            "  - {match: b, events: gpu, op: teleport, dimension: dp}\n",
            4,
            "rules.1.op",
        ),
        (
            "schema: hpcscope.kernel-classes/1\nrules:\n  - match: '(unclosed'\n    events: cpu\n"
            "    op: send\n    dimension: pp\n",
            3,
            "not a regular expression",
        ),
        ("schema: hpcscope.kernel-classes/9\nrules: []\n", 1, "schema"),
        ("schema: hpcscope.kernel-classes/1\nrules:\n  - [unclosed\n", 4, "not YAML"),
        (
            "schema: hpcscope.kernel-classes/1\nrules:\n  - {match: a, events: gpu, op: compute,"
            " dimension: none, colour: red}\n",
            3,
            "colour",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_file_and_line(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    path = tmp_path / "classes.yaml"
    path.write_text(text)
    with pytest.raises(ClassFileError) as err:
        load_class_table([path])
    assert err.value.source == str(path)
    assert err.value.line == line
    assert needle in str(err.value)

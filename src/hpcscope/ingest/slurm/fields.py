"""Field names each generation of Slurm's job JSON is known to carry.

A key outside these sets is a newer Slurm talking: the parsers keep reading (fields are looked
up by name) and report it once per document as a warning, so an operator learns that a field
hpcscope might want exists. Sets come from real captures: slurmrestd v0.0.40 (Slurm 23.11.1),
``squeue --json`` v0.0.37 (21.08.5), slurmrestd v0.0.37/v0.0.38 (Debian's 22.05.8, captured by
the integration test), the v0.0.41 OpenAPI example, and ``sacct --json`` 21.08-23.02.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Job keys of slurmrestd ``/slurm/v0.0.3x-v0.0.41/jobs`` and ``squeue --json``.
SLURMCTLD_JOB_KEYS = _words(
    """
    account accrue_time admin_comment allocating_node array_job_id array_max_tasks
    array_task_id array_task_string association_id batch_features batch_flag batch_host
    billable_tres burst_buffer burst_buffer_state cluster cluster_features command comment
    container container_id contiguous core_spec cores_per_socket cpu_frequency_governor
    cpu_frequency_maximum cpu_frequency_minimum cpus cpus_per_task cpus_per_tres cron
    current_working_directory deadline delay_boot dependency derived_exit_code eligible_time
    end_time excluded_nodes exclusive exit_code extra failed_node features federation_origin
    federation_siblings_active federation_siblings_viable flags gres_detail group_id group_name
    het_job_id het_job_id_set het_job_offset hold job_id job_resources job_size_str job_state
    last_sched_evaluation licenses mail_type mail_user max_cpus max_nodes
    maximum_switch_wait_time mcs_label memory_per_cpu memory_per_node memory_per_tres
    minimum_cpus_per_node minimum_switches minimum_tmp_disk_per_node name network nice
    node_count nodes oversubscribe partition power pre_sus_time preempt_time preemptable_time
    prefer priority profile qos reboot requeue required_nodes resize_time restart_cnt
    resv_name scheduled_nodes selinux_context shared show_flags sockets_per_board
    sockets_per_node standard_error standard_input standard_output start_time
    state_description state_reason submit_time suspend_time system_comment tasks
    tasks_per_board tasks_per_core tasks_per_node tasks_per_socket tasks_per_tres thread_spec
    threads_per_core time_limit time_minimum tres_alloc_str tres_bind tres_freq tres_per_job
    tres_per_node tres_per_socket tres_per_task tres_req_str user_id user_name wckey
    """
)

#: Job keys of ``sacct --json`` and slurmrestd ``/slurmdb/v0.0.3x-v0.0.41/jobs``.
SLURMDBD_JOB_KEYS = _words(
    """
    account comment allocation_nodes array association block cluster constraints container
    derived_exit_code time exit_code extra failed_node flags group het job_id name licenses
    mcs nodes partition hold priority qos qosreq required kill_request_user reservation script
    state steps submit_line tres used_gres user wckey working_directory stdin stdout stderr
    stdin_expanded stdout_expanded stderr_expanded restart_cnt
    """
)

#: Node keys of slurmrestd ``/nodes`` and ``sinfo --json`` (v0.0.37-v0.0.41).
NODE_KEYS = _words(
    """
    active_features address alloc_cpus alloc_idle_cpus alloc_memory architecture boards
    boot_time burstbuffer_network_address cluster_name comment cores cpu_binding cpu_load cpus
    effective_cpus energy external_sensors extra features free_mem free_memory gpu_spec gres
    gres_drained gres_used hostname instance_id instance_type last_busy mcs_label name
    next_state_after_reboot next_state_after_reboot_flags operating_system owner partitions
    port power real_memory reason reason_changed_at reason_set_by_user reservation
    res_cores_per_gpu resume_after slurmd_start_time sockets specialized_cores specialized_cpus
    specialized_memory state state_flags temporary_disk threads tres tres_used tres_weighted
    version weight topology slurmd_version idle_cpus
    """
)

#: Top-level keys of a slurmrestd/JSON command response.
DOCUMENT_KEYS = _words(
    """
    meta errors warnings jobs nodes partitions last_update last_backfill
    """
)

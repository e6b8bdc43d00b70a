#!/bin/bash
# Multi-node Slurm array template of cleanrl_scaling/utils/launcher.py, picked by --slurm-template without a PATH
# when --nodes or --tasks-per-node is above 1: each array task is one run of --nodes nodes x --tasks-per-node
# processes, started by one srun step, for scripts that join their processes themselves (sfl_kinetix_jax.py
# --distributed: jax.distributed reads the ranks and the coordinator from srun's environment). Placeholders: as in
# slurm_template.sh (docs/pipeline.md); the GPUs (--gres) and memory are per node, the CPUs per process.
#SBATCH --job-name={job_name}
#SBATCH --array={array}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks_per_node}
#SBATCH --cpus-per-task={cpus}
#SBATCH --mem={mem}
#SBATCH --time={time}
#SBATCH --output={log_dir}/%x_%A_%a.log
# a preempted or timed-out task is not restarted from zero: its run checkpoints on SIGTERM and RESUME=1 continues it
#SBATCH --no-requeue
{sbatch_options}

# Task i runs line i+1 of the commands file, once per process: every process gets the same flags.
cd "{workdir}"
export OMP_NUM_THREADS={cpus} MKL_NUM_THREADS={cpus} OPENBLAS_NUM_THREADS={cpus} PYTHONUNBUFFERED=1
CMD=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "{commands_file}")
echo "task ${SLURM_ARRAY_TASK_ID} of {num_tasks}: {nodes} node(s) x {tasks_per_node} process(es) on ${SLURM_JOB_NODELIST}: ${CMD}"
# --kill-on-bad-exit: one failed process ends the others, which would wait for it in their next collective
srun --kill-on-bad-exit=1 --nodes={nodes} --ntasks-per-node={tasks_per_node} bash -c "${CMD}"

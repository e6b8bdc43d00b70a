#!/bin/bash
# Slurm array template of cleanrl_scaling/utils/launcher.py (--slurm-template); docs/pipeline.md lists the
# placeholders: job_name array num_tasks last_task max_parallel commands_file log_dir cpus gpus nodes
# tasks_per_node time mem grace workdir python sbatch_options, each written in braces, plus your own from
# --slurm-set NAME=VALUE. sbatch_options holds the optional lines (--partition, --gpus-per-run, --sbatch).
# Shell variables keep their syntax (${SLURM_ARRAY_TASK_ID}); write two braces for a literal one.
#SBATCH --job-name={job_name}
#SBATCH --array={array}
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --mem={mem}
#SBATCH --time={time}
#SBATCH --output={log_dir}/%x_%A_%a.log
# A task carries on by itself (docs/cluster.md): SIGUSR1 {grace} s before the time limit to its first process, which
# has the run checkpoint and requeues the task; a task requeued by that, a preemption or a lost node continues its
# run from the checkpoint. One log per task over all its starts.
#SBATCH --signal=B:USR1@{grace}
#SBATCH --requeue
#SBATCH --open-mode=append
{sbatch_options}

cd "{workdir}"
export OMP_NUM_THREADS={cpus} MKL_NUM_THREADS={cpus} OPENBLAS_NUM_THREADS={cpus} PYTHONUNBUFFERED=1
# Task i runs line i+1 of the commands file (array indices start at 0); exec: Slurm's SIGUSR1 goes to this process.
exec "{python}" -m cleanrl_scaling.utils.slurm_task "{commands_file}"

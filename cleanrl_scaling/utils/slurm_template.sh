#!/bin/bash
# Slurm array template of cleanrl_scaling/utils/launcher.py (--slurm-template); docs/pipeline.md lists the
# placeholders: job_name array num_tasks last_task max_parallel commands_file log_dir cpus gpus nodes
# tasks_per_node time mem workdir python sbatch_options, each written in braces, plus your own from
# --slurm-set NAME=VALUE. sbatch_options holds the optional lines (--partition, --gpus-per-run, --sbatch).
# Shell variables keep their syntax (${SLURM_ARRAY_TASK_ID}); write two braces for a literal one.
#SBATCH --job-name={job_name}
#SBATCH --array={array}
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --mem={mem}
#SBATCH --time={time}
#SBATCH --output={log_dir}/%x_%A_%a.log
# a preempted or timed-out task is not restarted from zero: its run checkpoints on SIGTERM and RESUME=1 continues it
#SBATCH --no-requeue
{sbatch_options}

# Task i runs line i+1 of the commands file (array indices start at 0, sed lines at 1).
cd "{workdir}"
export OMP_NUM_THREADS={cpus} MKL_NUM_THREADS={cpus} OPENBLAS_NUM_THREADS={cpus} PYTHONUNBUFFERED=1
CMD=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "{commands_file}")
echo "task ${SLURM_ARRAY_TASK_ID} of {num_tasks} on $(hostname): ${CMD}"
# exec: the run replaces this shell, so Slurm's signals reach it directly and the task ends when the run has ended
eval "exec ${CMD}"

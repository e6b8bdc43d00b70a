#!/bin/bash
# Multi-node Slurm array template of cleanrl_scaling/utils/launcher.py, picked by --slurm-template without a PATH
# when --nodes or --tasks-per-node is above 1: each array task is one run of --nodes nodes x --tasks-per-node
# processes, started by one srun step, for scripts that join their processes themselves (sfl_kinetix_jax.py
# --distributed: jax.distributed reads the ranks and the coordinator from srun's environment, and each process uses
# every GPU that --gres gives its node). Placeholders: as in slurm_template.sh (docs/pipeline.md); the GPUs (--gres)
# and memory are per node, the CPUs per process.
#SBATCH --job-name={job_name}
#SBATCH --array={array}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks_per_node}
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
echo "{nodes} node(s) x {tasks_per_node} process(es) on ${SLURM_JOB_NODELIST}"
# Task i runs line i+1 of the commands file in every process of one srun step. --kill-on-bad-exit: one failed process
# ends the others, which would wait for it in their next collective; --cpus-per-task: since Slurm 22.11 srun does not
# inherit sbatch's (https://slurm.schedmd.com/srun.html#OPT_cpus-per-task).
exec "{python}" -m cleanrl_scaling.utils.slurm_task "{commands_file}" \
  srun --kill-on-bad-exit=1 --nodes={nodes} --ntasks-per-node={tasks_per_node} --cpus-per-task={cpus}

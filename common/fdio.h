/*
 * fdio.h - whole reads and writes on file descriptors, and waiting for a child, each retried
 * when a signal interrupts it (EINTR): the one copy of the loops that the pipes between npusim
 * and its child processes (isolated runs, sweep points, RL probes) and the sweep journal need.
 */
#ifndef NPUSIM_COMMON_FDIO_H
#define NPUSIM_COMMON_FDIO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Read exactly n bytes into buf; false on end of file or an error. */
bool npu_read_all(int fd, void *buf, size_t n);

/* Write exactly n bytes of buf; false on an error. */
bool npu_write_all(int fd, const void *buf, size_t n);

/* waitpid(pid, status, 0), retried on EINTR; returns its result (status may be NULL). */
pid_t npu_wait_child(pid_t pid, int *status);

#endif

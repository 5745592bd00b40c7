// SPDX-License-Identifier: GPL-2.0
/* layerof.c: the layer scx_layered has each thread in, read from the scheduler's own task state.
 *
 * Usage: threadwise-layer-of TID...
 * Prints one line per TID: "TID LAYER REFRESH", LAYER the index of the layer scx_layered placed
 * the thread in (task_ctx.layer_id; MAX_LAYERS, 16 in 1.1.4, until the thread is first matched:
 * any index past the config's layers is no layer), and REFRESH 1 while a re-match is pending
 * (task_ctx.refresh_layer: the thread has not been runnable since its flag was set);
 * "TID - gone" when the thread has ended, "TID - nocontext" when it lives but the map holds no
 * context for it, "TID - ERRNO" (a number) on any other failure. Exit 0; 2 on a usage error; 3
 * when no scx_layered task map is loaded.
 *
 * Problem: scx_layered's debug match map (layer_match_dbg, --enable-match-debug) loses entries
 * when many threads match at once: each insert takes an element from a small per-CPU pool and
 * its result is not checked, while the thread is placed all the same (docs/lab.md "Membership:
 * entries lost in a burst"). A probe that reads that map cannot tell a thread in no layer from
 * one whose entry was dropped.
 * Approach: read the placement itself. scx_layered keeps each task's context, layer_id
 * included, in a task-local storage map (`task_ctxs`), which user space can look up with a
 * pidfd as the key (kernel/bpf/bpf_task_storage.c). For each TID: pidfd_open(TID, PIDFD_THREAD)
 * (a thread, not only a process leader: Linux 6.9+), then BPF_MAP_LOOKUP_ELEM. The offsets of
 * layer_id and refresh_layer come from the map's BTF, so no layout is assumed. Of several maps
 * named task_ctxs, the newest whose value has a layer_id member is scx_layered's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>

#ifndef PIDFD_THREAD
#define PIDFD_THREAD 0x80 /* O_EXCL, include/uapi/linux/pidfd.h */
#endif

static const char MAP_NAME[] = "task_ctxs";

struct layout {
	long layer_offset;   /* bytes into the value; -1 when absent */
	long refresh_offset;
};

/* The byte offset of member NAME of struct TYPE_ID in BTF, or -1. */
static long member_offset(const struct btf *btf, __u32 type_id, const char *name)
{
	const struct btf_type *type = btf__type_by_id(btf, btf__resolve_type(btf, type_id));
	if (!type || !btf_is_struct(type))
		return -1;
	const struct btf_member *member = btf_members(type);
	for (int i = 0; i < btf_vlen(type); i++, member++) {
		const char *found = btf__name_by_offset(btf, member->name_off);
		if (found && strcmp(found, name) == 0)
			return btf_member_bit_offset(type, i) / 8;
	}
	return -1;
}

/* An fd of the newest task_ctxs map whose value has a layer_id, with its layout and value size. */
static int find_map(struct layout *layout, __u32 *value_size)
{
	__u32 id = 0;
	int chosen = -1;
	while (bpf_map_get_next_id(id, &id) == 0) {
		int fd = bpf_map_get_fd_by_id(id);
		if (fd < 0)
			continue;
		struct bpf_map_info info = {};
		__u32 len = sizeof(info);
		if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0 || strcmp(info.name, MAP_NAME) != 0 ||
		    info.type != BPF_MAP_TYPE_TASK_STORAGE || info.btf_id == 0) {
			close(fd);
			continue;
		}
		struct btf *btf = btf__load_from_kernel_by_id(info.btf_id);
		long layer = btf ? member_offset(btf, info.btf_value_type_id, "layer_id") : -1;
		long refresh = btf ? member_offset(btf, info.btf_value_type_id, "refresh_layer") : -1;
		btf__free(btf);
		if (layer < 0) {
			close(fd);
			continue;
		}
		if (chosen >= 0)
			close(chosen); /* ids grow: a later map is newer */
		chosen = fd;
		layout->layer_offset = layer;
		layout->refresh_offset = refresh;
		*value_size = info.value_size;
	}
	return chosen;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		fprintf(stderr, "usage: %s TID...\n"
			"  prints \"TID LAYER REFRESH\" per thread (scx_layered's task_ctx), or \"TID - gone\",\n"
			"  \"TID - nocontext\", \"TID - ERRNO\" when it has none\n",
			argv[0]);
		return 2;
	}
	struct layout layout = {-1, -1};
	__u32 value_size = 0;
	int map = find_map(&layout, &value_size);
	if (map < 0) {
		fprintf(stderr, "layer-of: no scx_layered task map (%s with a layer_id) is loaded\n", MAP_NAME);
		return 3;
	}
	unsigned char *value = calloc(1, value_size);
	if (!value)
		return 1;
	for (int i = 1; i < argc; i++) {
		char *end;
		long tid = strtol(argv[i], &end, 10);
		if (*end != '\0' || tid <= 0) {
			fprintf(stderr, "layer-of: not a thread id: %s\n", argv[i]);
			return 2;
		}
		int pidfd = syscall(SYS_pidfd_open, (pid_t)tid, PIDFD_THREAD);
		if (pidfd < 0 && errno == EINVAL) /* a kernel before 6.9: only a process leader */
			pidfd = syscall(SYS_pidfd_open, (pid_t)tid, 0);
		if (pidfd < 0 && errno == ESRCH) {
			printf("%ld - gone\n", tid);
		} else if (pidfd < 0) {
			printf("%ld - %d\n", tid, errno);
		} else if (bpf_map_lookup_elem(map, &pidfd, value) != 0) {
			int lookup_errno = errno;
			/* ENOENT is both "no context" and "ended since the pidfd was opened": signal 0
			 * to the pidfd tells them apart */
			int alive = syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
			if (!alive)
				printf("%ld - gone\n", tid);
			else if (lookup_errno == ENOENT)
				printf("%ld - nocontext\n", tid);
			else
				printf("%ld - %d\n", tid, lookup_errno);
		} else {
			__u32 layer;
			memcpy(&layer, value + layout.layer_offset, sizeof(layer));
			int refresh = layout.refresh_offset >= 0 ? value[layout.refresh_offset] != 0 : -1;
			printf("%ld %u %d\n", tid, layer, refresh);
		}
		if (pidfd >= 0)
			close(pidfd);
	}
	free(value);
	close(map);
	return 0;
}

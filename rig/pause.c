/* The rig's pod sandbox process: holds the pod's namespaces open, reaps any child re-parented to it, and exits
 * at once on SIGINT or SIGTERM, which is all a sandbox's process has to do. Written for the rig (the node pulls
 * nothing, so registry.k8s.io/pause is built here from this file): gcc -static -O2 -o pause pause.c */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal_number) {
    (void)signal_number;
    _exit(0);
}

static void reap(int signal_number) {
    (void)signal_number;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    if (getpid() != 1) {
        /* Not a sandbox: nothing to hold. */
        return 1;
    }
    sigaction(SIGINT, &on_stop, NULL);
    sigaction(SIGTERM, &on_stop, NULL);
    sigaction(SIGCHLD, &on_child, NULL);
    for (;;) {
        pause();
    }
}

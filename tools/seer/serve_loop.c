/*
 * serve_loop.c: `seer serve`'s scheduler thread and its inbox. The HTTP threads queue jobs
 * (serve_enqueue); the thread submits their choices' requests to the scheduler between steps, steps
 * while anything is active and sleeps on a condition variable otherwise. It lets a job go
 * once its request has finished, and publishes the scheduler's counters for /metrics. When
 * the server stops it cancels what is live and submits nothing more.
 *
 * Not for: the HTTP layer (serve_http.c), the options and shutdown (cmd_serve.c).
 */
#include "serve.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool serve_enqueue(serve_state *srv, serve_job *j) {
    bool ok = false;
    pthread_mutex_lock(&srv->mu);
    if (!srv->draining && !srv->stop) {
        if (srv->n_inbox == srv->cap_inbox) {
            int cap = srv->cap_inbox ? 2 * srv->cap_inbox : 16;
            serve_job **p = realloc(srv->inbox, sizeof *p * cap);
            if (p)
                srv->inbox = p, srv->cap_inbox = cap;
        }
        if (srv->n_inbox < srv->cap_inbox) {
            pthread_mutex_lock(&j->mu);
            j->refs += j->n_choices; /* the scheduler's, one until each choice's request is finished */
            pthread_mutex_unlock(&j->mu);
            srv->inbox[srv->n_inbox++] = j;
            ok = true;
            pthread_cond_broadcast(&srv->wake);
        }
    }
    pthread_mutex_unlock(&srv->mu);
    return ok;
}

/* Submits every choice of a job; live gains those submitted. When one cannot be, the job
 * fails: that choice and the rest are failed, and those already submitted are cancelled. */
static void submit_job(serve_state *srv, serve_job *j, bool stop, serve_choice ***live, int *n_live, int *cap_live) {
    char why[256] = "";
    bool failed = false;
    int n_sub = 0;
    const int n = j->n_choices; /* failing the last choice may free the job */
    for (int i = 0; i < n; i++) {
        serve_choice *c = &j->choices[i];
        if (*n_live == *cap_live) {
            int cap = *cap_live ? 2 * *cap_live : 32;
            serve_choice **p = realloc(*live, sizeof *p * cap);
            if (p)
                *live = p, *cap_live = cap;
        }
        seer_status st = failed || stop ? SEER_ERR_INVALID_ARG
                         : *n_live < *cap_live ? seer_sched_submit(srv->sched, c->req) : SEER_ERR_OOM;
        if (st == SEER_OK) {
            (*live)[(*n_live)++] = c;
            n_sub++;
            continue;
        }
        if (!failed)
            snprintf(why, sizeof why, "%s", stop ? "the server is shutting down" : seer_last_error());
        failed = true;
        serve_choice_fail(c, why);
    }
    if (failed)
        for (int i = 0; i < n_sub; i++)
            seer_request_cancel((*live)[*n_live - 1 - i]->req);
}

/* The scheduler thread. live: the choices whose requests are in the scheduler. */
void *serve_sched_loop(void *arg) {
    serve_state *srv = arg;
    serve_choice **live = NULL;
    serve_job **taken = NULL;
    int n_live = 0, cap_live = 0, cap_taken = 0;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        while (!srv->n_inbox && !n_live && !srv->stop)
            pthread_cond_wait(&srv->wake, &srv->mu);
        if (srv->stop && !srv->n_inbox && !n_live)
            break;
        const int n_taken = srv->n_inbox;
        if (n_taken > cap_taken) {
            serve_job **p = realloc(taken, sizeof *p * n_taken);
            if (p)
                taken = p, cap_taken = n_taken;
        }
        const int n_take = n_taken <= cap_taken ? n_taken : 0;
        if (n_take)
            memcpy(taken, srv->inbox, sizeof *taken * n_take);
        memmove(srv->inbox, srv->inbox + n_take, sizeof *taken * (srv->n_inbox - n_take));
        srv->n_inbox -= n_take;
        const bool stop = srv->stop;
        pthread_mutex_unlock(&srv->mu);
        for (int i = 0; i < n_take; i++)
            submit_job(srv, taken[i], stop, &live, &n_live, &cap_live);
        if (stop)
            for (int i = 0; i < n_live; i++)
                seer_request_cancel(live[i]->req);
        if (n_live) {
            seer_status st = seer_sched_step(srv->sched, NULL);
            if (st != SEER_OK) {
                /* a failed step changed nothing; one that fails again would fail forever */
                fprintf(stderr, "seer serve: scheduler step failed: %s (%s); cancelling the requests\n",
                        seer_last_error(), seer_status_str(st));
                for (int i = 0; i < n_live; i++)
                    seer_request_cancel(live[i]->req);
            }
        }
        /* finished requests are out of the scheduler: the job may let go of them */
        for (int i = n_live - 1; i >= 0; i--)
            if (seer_request_finished(live[i]->req)) {
                serve_job *j = live[i]->job;
                live[i] = live[--n_live];
                serve_job_unref(j);
            }
        seer_sched_stats ss;
        seer_sched_get_stats(srv->sched, &ss);
        pthread_mutex_lock(&srv->metrics.mu);
        srv->metrics.sched = ss;
        pthread_mutex_unlock(&srv->metrics.mu);
        pthread_mutex_lock(&srv->mu);
    }
    pthread_mutex_unlock(&srv->mu);
    free(live);
    free(taken);
    return NULL;
}

/*
 * chat.h: chat templates. The public part (seer_chat_message, seer_chat_template,
 * seer_chat_template_init, seer_chat_render, seer_token_is_eog) is declared in seer.h's
 * "Chat templates" section; this header adds what tests drive without a model file.
 *
 * seer does not run Jinja: it recognises the few template families it supports by
 * distinctive substrings and renders them with fixed code that reproduces what the
 * models' own Jinja templates produce for plain system/user/assistant conversations.
 */
#ifndef SEER_CHAT_H
#define SEER_CHAT_H

#include "seer.h"

/* Recognises a template text (tokenizer.chat_template, len bytes, not NUL-terminated) as in
 * seer_chat_template_init; name overrides the family as there. tmpl may be NULL (no template
 * in the file). */
seer_status seer_chat_detect(const char *tmpl, size_t len, const char *name,
                             seer_chat_template *out);

#endif

/*
 * serve_page.c: the chat page of `seer serve` at GET /: tools/seer/chat.html, whose bytes CMake
 * writes into serve_page_html.c (tools/seer/embed.cmake), so the binary needs no file beside
 * it. The page needs no API key to load (it asks the user for one and sends it with its API
 * calls). Its headers keep it to itself: its own inline script and style, fetches to its own
 * origin only, no framing.
 *
 * Not for: what the page does (chat.html) or the API it calls (serve_api.c).
 */
#include "serve.h"

#include <stddef.h>

extern const unsigned char serve_page_html[];
extern const size_t serve_page_html_len;

struct MHD_Response *serve_page_response(void) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(serve_page_html_len, (void *)serve_page_html, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return NULL;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    return r;
}

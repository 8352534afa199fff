// web: the files of ft serve's web page (src/server/web/: index.html, app.js, app.css), built
// into the binary. The build writes them as C arrays (scripts/embed.sh, from the Makefile)
// into srv_web_files; the HTTP side serves them at their paths, and the page at / too.
// Read-only data: safe from any thread.
#ifndef FT_SERVER_WEB_H
#define FT_SERVER_WEB_H

#include <stddef.h>

typedef struct srv_web_file {
    const char *path;           // the URL path: "/index.html"
    const char *ctype;          // its Content-Type
    const unsigned char *data;  // (size) the file's bytes
    size_t size;
    const char *etag;           // quoted: the bytes' CRC (cksum) and size, in hex
} srv_web_file;

extern const srv_web_file srv_web_files[];
extern const int srv_web_n_files;

// The file served at path ("/" serves "/index.html"), or NULL.
const srv_web_file *srv_web_find(const char *path);

#endif

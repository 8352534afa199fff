// web.c: finds the web page's files (web.h) by path.
#include "web.h"

#include <string.h>

const srv_web_file *srv_web_find(const char *path) {
    if (!strcmp(path, "/")) path = "/index.html";
    for (int i = 0; i < srv_web_n_files; i++)
        if (!strcmp(srv_web_files[i].path, path)) return &srv_web_files[i];
    return NULL;
}

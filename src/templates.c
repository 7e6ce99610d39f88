/* The template set (templates.h): embedded files, the NORMJIT_TEMPLATE_DIR override folder and the set
 * hash. Codegen and the backends read templates through here only. */
#include "templates.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- template sets */

/* Files read from NORMJIT_TEMPLATE_DIR live until the process ends (nj_template_get hands out borrowed
 * text); a file is re-read on each lookup and a changed version becomes a new entry. */
typedef struct tpl_file {
    struct tpl_file *next;
    char *path;
    char *text;
    size_t len;
} tpl_file;
static tpl_file *tpl_dir_files;
static pthread_mutex_t tpl_dir_lock = PTHREAD_MUTEX_INITIALIZER;

static char *tpl_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    nj_buf b;
    nj_buf_init(&b);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) nj_buf_append(&b, chunk, n);
    bool err = ferror(f);
    fclose(f);
    if (err) {
        nj_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return nj_buf_take(&b);
}

static nj_status tpl_get_dir(const char *dir, const char *name, const char **text, size_t *len)
{
    NJ_RETURN_IF(strstr(name, "..") || name[0] == '/', NJ_ERR_TEMPLATE, "template name '%s' leaves the folder", name);
    char path[4096];
    NJ_RETURN_IF((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path, NJ_ERR_TEMPLATE,
                 "template path too long: %s/%s", dir, name);
    size_t n = 0;
    char *data = tpl_read_file(path, &n);
    NJ_RETURN_IF(!data, NJ_ERR_TEMPLATE, "template %s not found (%s=%s)", name, NJ_TPL_DIR_ENV, dir);
    pthread_mutex_lock(&tpl_dir_lock);
    for (tpl_file *f = tpl_dir_files; f; f = f->next) {
        if (strcmp(f->path, path) == 0 && f->len == n && memcmp(f->text, data, n) == 0) {
            pthread_mutex_unlock(&tpl_dir_lock);
            free(data);
            *text = f->text;
            *len = f->len;
            return NJ_OK;
        }
    }
    tpl_file *f = calloc(1, sizeof *f);
    char *p = strdup(path);
    if (!f || !p) {
        pthread_mutex_unlock(&tpl_dir_lock);
        free(f), free(p), free(data);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "reading template %s", name);
    }
    *f = (tpl_file){tpl_dir_files, p, data, n};
    tpl_dir_files = f;
    pthread_mutex_unlock(&tpl_dir_lock);
    *text = data;
    *len = n;
    return NJ_OK;
}

static const char *tpl_dir(void)
{
    const char *d = getenv(NJ_TPL_DIR_ENV);
    return d && *d ? d : NULL;
}

static const nj_embedded_file *tpl_embedded(const char *name)
{
    for (size_t i = 0; i < nj_embedded_template_count; i++)
        if (strcmp(nj_embedded_templates[i].name, name) == 0) return &nj_embedded_templates[i];
    return NULL;
}

nj_status nj_template_get(const char *name, const char **text, size_t *len)
{
    NJ_RETURN_IF(!name || !text || !len, NJ_ERR_NULL_POINTER, "template lookup: NULL argument");
    const nj_embedded_file *e = tpl_embedded(name);
    const char *dir = tpl_dir();
    if (dir && !(e && e->generated)) return tpl_get_dir(dir, name, text, len);
    NJ_RETURN_IF(!e, NJ_ERR_TEMPLATE, "no embedded template named '%s'", name);
    *text = e->text;
    *len = e->len;
    return NJ_OK;
}

/* ---------------------------------------------------------------- template set hash */

typedef struct tpl_entry {
    char *name;
    char *text;
    size_t len;
    bool borrowed; /* name and text point into the embedded set */
} tpl_entry;

static int tpl_entry_cmp(const void *a, const void *b)
{
    return strcmp(((const tpl_entry *)a)->name, ((const tpl_entry *)b)->name);
}

/* Hash over (name, length, bytes) of every file, in name order, so the order files are found in
 * cannot change it, and moving bytes between files or names changes it. */
static void tpl_hash_entries(tpl_entry *e, size_t n, char out[33])
{
    if (n > 1) qsort(e, n, sizeof *e, tpl_entry_cmp);
    nj_buf b;
    nj_buf_init(&b);
    for (size_t i = 0; i < n; i++) {
        nj_buf_printf(&b, "%s%c%zu%c", e[i].name, 0, e[i].len, 0);
        nj_buf_append(&b, e[i].text, e[i].len);
    }
    nj_hash_hex(b.data ? b.data : "", b.len, out);
    if (b.failed) snprintf(out, 33, "%s", "00000000000000000000000000000000");
    nj_buf_free(&b);
}

static char tpl_embedded_hash[33];
static pthread_once_t tpl_embedded_once = PTHREAD_ONCE_INIT;

static void tpl_hash_embedded(void)
{
    size_t n = nj_embedded_template_count;
    tpl_entry *e = calloc(n ? n : 1, sizeof *e);
    if (!e) {
        snprintf(tpl_embedded_hash, sizeof tpl_embedded_hash, "%s", "00000000000000000000000000000000");
        return;
    }
    for (size_t i = 0; i < n; i++)
        e[i] = (tpl_entry){(char *)nj_embedded_templates[i].name, (char *)nj_embedded_templates[i].text,
                           nj_embedded_templates[i].len, true};
    tpl_hash_entries(e, n, tpl_embedded_hash);
    free(e);
}

typedef struct tpl_list {
    tpl_entry *e;
    size_t n, cap;
    bool failed;
} tpl_list;

/* A new zeroed entry at the end of l (counted once filled: the caller does l->n++), NULL when full. */
static tpl_entry *tpl_list_add(tpl_list *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        tpl_entry *e = realloc(l->e, cap * sizeof *e);
        if (!e) {
            l->failed = true;
            return NULL;
        }
        l->e = e, l->cap = cap;
    }
    memset(&l->e[l->n], 0, sizeof l->e[l->n]);
    return &l->e[l->n];
}

/* The generated files join a folder's: they are part of every active set. */
static void tpl_list_generated(tpl_list *l)
{
    for (size_t i = 0; i < nj_embedded_template_count; i++) {
        const nj_embedded_file *f = &nj_embedded_templates[i];
        if (!f->generated) continue;
        tpl_entry *e = tpl_list_add(l);
        if (!e) return;
        *e = (tpl_entry){(char *)f->name, (char *)f->text, f->len, true};
        l->n++;
    }
}

static void tpl_list_dir(const char *root, const char *rel, tpl_list *l, int depth)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char sub[4096], full[8192];
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth < 8) tpl_list_dir(root, sub, l, depth + 1);
            continue;
        }
        if (!S_ISREG(st.st_mode)) continue;
        const nj_embedded_file *gen = tpl_embedded(sub);
        if (gen && gen->generated) continue; /* the embedded copy stands (nj_template_get) */
        tpl_entry *e = tpl_list_add(l);
        if (!e) break;
        e->name = strdup(sub);
        e->text = tpl_read_file(full, &e->len);
        if (!e->name || !e->text) {
            free(e->name), free(e->text);
            l->failed = true;
            continue;
        }
        l->n++;
    }
    closedir(d);
}

/* Hashes of template folders, interned so that the returned text lives as long as the process. */
typedef struct tpl_hash_node {
    struct tpl_hash_node *next;
    char hex[33];
} tpl_hash_node;
static tpl_hash_node *tpl_dir_hashes;

static const char *tpl_intern_hash(const char hex[33])
{
    pthread_mutex_lock(&tpl_dir_lock);
    tpl_hash_node *h = tpl_dir_hashes;
    while (h && strcmp(h->hex, hex) != 0) h = h->next;
    if (!h && (h = calloc(1, sizeof *h)) != NULL) {
        memcpy(h->hex, hex, 33);
        h->next = tpl_dir_hashes;
        tpl_dir_hashes = h;
    }
    pthread_mutex_unlock(&tpl_dir_lock);
    return h ? h->hex : "00000000000000000000000000000000";
}

const char *nj_template_set_hash(void)
{
    const char *dir = tpl_dir();
    if (!dir) {
        pthread_once(&tpl_embedded_once, tpl_hash_embedded);
        return tpl_embedded_hash;
    }
    tpl_list l = {0};
    tpl_list_dir(dir, "", &l, 0);
    tpl_list_generated(&l);
    char hex[33];
    tpl_hash_entries(l.e, l.n, hex);
    for (size_t i = 0; i < l.n; i++)
        if (!l.e[i].borrowed) free(l.e[i].name), free(l.e[i].text);
    free(l.e);
    return tpl_intern_hash(hex);
}

/* Opens a file through the remfile plugin from C, as any HDF5 1.14+ program
 * can: H5Pset_driver_by_name(fapl, "remfile", config), then H5Fopen.
 *
 *     plugin_open URL CONFIG
 *
 * Prints "links N" (the root group's links) or "failed". Declares the few
 * HDF5 functions it uses itself, so that it builds against a library without
 * headers (the h5py wheel's). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int64_t hid_t;
typedef int herr_t;
typedef uint64_t hsize_t;

/* H5G_info_t */
typedef struct {
    int storage_type;
    hsize_t nlinks;
    int64_t max_corder;
    _Bool mounted;
} H5G_info_t;

extern hid_t H5P_CLS_FILE_ACCESS_ID_g;
herr_t H5open(void);
hid_t H5Pcreate(hid_t cls);
herr_t H5Pset_driver_by_name(hid_t fapl, const char *name, const char *config);
hid_t H5Fopen(const char *name, unsigned flags, hid_t fapl);
herr_t H5Gget_info(hid_t loc, H5G_info_t *info);
herr_t H5Fclose(hid_t file);
herr_t H5Pclose(hid_t plist);

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL CONFIG\n", argv[0]);
        return 2;
    }
    H5open();
    hid_t fapl = H5Pcreate(H5P_CLS_FILE_ACCESS_ID_g);
    setvbuf(stdout, NULL, _IONBF, 0);
    if (fapl < 0 || H5Pset_driver_by_name(fapl, "remfile", argv[2]) < 0) {
        printf("failed\n");
        return 0;
    }
    hid_t file = H5Fopen(argv[1], 0 /* H5F_ACC_RDONLY */, fapl);
    if (file < 0) {
        printf("failed\n");
        return 0;
    }
    H5G_info_t info;
    memset(&info, 0, sizeof info);
    if (H5Gget_info(file, &info) < 0) {
        printf("failed\n");
        return 0;
    }
    printf("links %llu\n", (unsigned long long)info.nlinks);
    fflush(stdout);
    if (H5Fclose(file) < 0 || H5Pclose(fapl) < 0) {
        printf("close failed\n");
    }
    return 0;
}

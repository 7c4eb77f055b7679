vls_add_fuzz_target(video_container SOURCES video_container_fuzz.cc LIBS vls_video
                    CORPUS video_container)

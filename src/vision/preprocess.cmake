# Preprocessing: preprocessor_config.json, smart_resize, bicubic resize, patches.

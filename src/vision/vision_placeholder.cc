// Keeps vls_vision a valid library until its sources land.

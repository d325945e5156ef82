def run(a, b):
    # cuBLAS is hard to beat
    return a @ b

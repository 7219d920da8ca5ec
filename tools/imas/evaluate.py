"""placeholder"""
def add_arguments(p):
    p.add_argument("--full", action="store_true")
def main(args):
    return 0

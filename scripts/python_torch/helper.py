# scripts/python-torch.sh's steps in Python, run by the host's python3:
#   helper.py stubs TREE WHEEL WORK   stubs in TREE/torch/lib for the libraries the tree does not carry (stubs.py)
#   helper.py records TREE            each dist-info's RECORD, rewritten to list the files TREE holds (records.py)
import sys

import records
import stubs


def main(argv):
    if argv[1] == "stubs":
        stubs.make(*argv[2:5])
    elif argv[1] == "records":
        records.records(argv[2])


if __name__ == "__main__":
    main(sys.argv)

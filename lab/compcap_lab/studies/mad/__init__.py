"""The maximum-discrepancy (MAD) comparison of captioning configurations (Wan et al., 2022;
``compcap-lab mad``): ``study`` (the steps and their resumable state), ``pool`` (the image pool R and its
captions), ``scoring`` (NGSM profiles, the referee, the dominance floor), ``ties`` (the ties at S = 0 and
the tie-break's sensitivity) and ``report`` (``mad.md``, its plots and the summary table)."""
